"""`tgagent chat` on a terminal shows its prompt before it builds the runtime: a person can
type while the libraries load and the database opens."""

from __future__ import annotations

import os
import pty
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read_all(master: int, proc: subprocess.Popen[bytes], seconds: float) -> bytes:
    """Return what the process wrote on its terminal until it ended."""
    seen = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the process ended and closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    return seen


def test_the_prompt_comes_before_the_database(tmp_path: Path) -> None:
    """With no database to reach, the prompt shows first, then the error on a line of its
    own (no traceback), exit 2: the prompt did not wait for the runtime."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "LANG": "C.UTF-8",
        "DATABASE_URL": f"postgresql://nobody@127.0.0.1:{_closed_port()}/none",
        "PG_CONNECT_TIMEOUT": "2",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{_closed_port()}/v1",
        "OPENAI_API_KEY": "test",
    }
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "src.cli", "chat", "--lang", "en"],
        cwd=tmp_path,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    try:
        seen = _read_all(master, proc, 120).decode(errors="replace")
    finally:
        os.close(master)
        proc.wait(timeout=30)
    assert proc.returncode == 2, seen
    lines = seen.replace("\r\n", "\n").splitlines()
    # The model, its endpoint and its window first (nothing answers there: the default).
    assert lines[0].startswith("Model gpt-4o-mini at http://127.0.0.1:"), seen
    assert "context window 16000 tokens (the server did not say" in lines[0], seen
    assert lines[1] == "you> ", seen
    assert lines[2].startswith("tgagent: ") and "Traceback" not in seen, seen


@pytest.mark.parametrize(
    ("flavour", "said"),
    [
        ("llama.cpp", "2048 tokens (said by the llama.cpp server, /props)"),
        ("vllm", "2048 tokens (said by the vLLM server, /v1/models)"),
        ("ollama", "2048 tokens (said by Ollama, /api/show and /api/ps)"),
    ],
)
def test_the_chat_says_its_model_endpoint_and_window(
    tmp_path: Path, flavour: str, said: str
) -> None:
    """The first line says which model, where, its window and where the window came from,
    asked of the server before the runtime is built."""
    with FakeOpenAI() as llm:
        llm.flavour, llm.window = flavour, 2048
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "PYTHONPATH": str(ROOT),
            "LANG": "C.UTF-8",
            "DATABASE_URL": f"postgresql://nobody@127.0.0.1:{_closed_port()}/none",
            "PG_CONNECT_TIMEOUT": "2",
            "OPENAI_BASE_URL": llm.base_url,
            "TGAGENT_DATA_DIR": str(tmp_path / "data"),
        }
        proc = subprocess.run(
            [sys.executable, "-m", "src.cli", "chat", "--lang", "en"],
            cwd=tmp_path,
            env=env,
            input=b"",
            capture_output=True,
            timeout=120,
        )
    first = proc.stderr.decode().splitlines()[0]
    assert first == f"Model gpt-4o-mini at {llm.base_url}, context window {said}.", first
