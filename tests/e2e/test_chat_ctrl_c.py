"""Ctrl+C in `tgagent chat`: a real process at a terminal (a pty), a real SIGINT."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_chat_cli import _env

pytestmark = pytest.mark.slow

LONG = " ".join(f"word{i}" for i in range(400))  # at 16 characters a chunk: ~200 chunks


class Terminal:
    """`tgagent chat` with a pty for its stdin (a person types), its stdout read aside."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "src.cli", "chat", "--user-id", "77", "--lang", "en"],
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        os.close(slave)
        self.out = b""
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := self.proc.stdout.read1(4096):
            with self._lock:
                self.out += chunk

    @property
    def text(self) -> str:
        with self._lock:
            return self.out.decode("utf-8", "replace")

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def ctrl_c(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def wait_for(self, condition: Callable[[str], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self.text):
            if self.proc.poll() is not None:
                raise AssertionError(f"chat ended before {what}: {self.stderr()}\n{self.text}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout} s:\n{self.text}")
            time.sleep(0.05)

    def stderr(self) -> str:
        return self.proc.stderr.read().decode() if self.proc.stderr else ""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        os.close(self.master)


@pytest.fixture
def terminal(fresh_schema: str, llm: Any, tmp_path: Path) -> Iterator[Callable[[], Terminal]]:
    opened: list[Terminal] = []

    def start() -> Terminal:
        env = _env(fresh_schema, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test-key")
        opened.append(Terminal(env, tmp_path))
        return opened[-1]

    yield start
    for term in opened:
        term.close()


async def test_ctrl_c_stops_the_reply_keeps_it_and_a_second_one_quits(
    pool: Any, llm: Any, terminal: Callable[[], Terminal]
) -> None:
    llm.stream_delay = 0.05
    llm.script(LONG, "You were telling a story.")
    term = terminal()
    term.wait_for(lambda out: out.count("you> ") >= 1, "first prompt")
    term.type("tell me a long story")
    term.wait_for(lambda out: "word3 " in out, "the reply being written")
    term.ctrl_c()
    term.wait_for(lambda out: "⏹ stopped" in out and out.count("you> ") >= 2, "the next prompt")
    assert "word399" not in term.text  # stopped, not written to its end
    assert llm.cancelled_streams == 1  # the model's stream was closed: it stops writing

    # The chat goes on, and the model sees the part it wrote as its answer.
    term.type("what were you doing?")
    term.wait_for(lambda out: "You were telling a story." in out, "the second answer")
    term.wait_for(lambda out: out.count("you> ") >= 3, "the third prompt")
    seen = llm.requests[-1]["messages"]
    partial = [m["content"] for m in seen if m["role"] == "assistant"]
    assert len(partial) == 1 and "word0 word1 word2 word3" in partial[0]
    assert "word399" not in partial[0] and "interrupted by the user" in partial[0]

    term.ctrl_c()  # at the prompt: quits
    assert term.proc.wait(60) == 0
    err = term.stderr()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT content, meta FROM messages WHERE role = 'assistant' ORDER BY id"
        )
        rows = await cur.fetchall()
    assert rows[0]["meta"] == {"interrupted": True}
    assert rows[0]["content"].startswith("word0 word1 word2 word3")
    assert rows[0]["content"] in partial[0]
    assert rows[1]["content"] == "You were telling a story."


async def test_two_quick_ctrl_c_during_a_reply_quit(
    pool: Any, llm: Any, terminal: Callable[[], Terminal]
) -> None:
    llm.stream_delay = 0.05
    llm.script(LONG)
    term = terminal()
    term.wait_for(lambda out: out.count("you> ") >= 1, "first prompt")
    term.type("tell me a long story")
    term.wait_for(lambda out: "word3 " in out, "the reply being written")
    term.ctrl_c()
    # Two signals sent back to back may merge into one (POSIX does not queue them), which
    # two presses of a person never do.
    time.sleep(0.1)
    term.ctrl_c()
    assert term.proc.wait(60) == 0
    assert "word399" not in term.text
    assert "Traceback" not in term.stderr()
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT meta FROM messages WHERE role = 'assistant'")
        rows = await cur.fetchall()
    assert [r["meta"] for r in rows] == [{"interrupted": True}]  # stored all the same
