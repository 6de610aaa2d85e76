"""Memory through `tgagent chat` as a process: facts across /new, a summary that loses
nothing (squashes and a failing summary model included), an idle session's compact.

The chat model is the fake server's `default_reply`; the summary model (facts, summaries
and compacts) is another model name, answered by the memory stand-in through a `Ledger`
that records what reached it. The subprocess reads stdin at its own pace, so nothing is
scripted between turns: the replies decide from the request what turn it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from src.config import Settings
from src.graph import prompts
from src.graph.timestamps import strip_stamp
from tests.fakes.openai_server import Fault, message_text
from tests.memory_ledger import TOKEN, Ledger

ROOT = Path(__file__).resolve().parents[2]
CHAT_MODEL = "gpt-4o-mini"
# Facts, summaries and compacts go to their own model name, so they never take a reply
# meant for the chat model, and the ledger sees only them.
SUMMARY_MODEL = "memory-e2e"
_LABEL = re.compile(r"^\[\d+\] \w+: ")


def chat_env(dsn: str, llm: Any, **extra: str) -> dict[str, str]:
    """Return an environment for `tgagent chat` on the test's schema and the fake model.

    Every tgagent setting of the developer's shell is dropped: the test sets its own.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in Settings.model_fields and not k.startswith(("OPENAI_", "PG_"))
    }
    env.pop("TEST_DATABASE_URL", None)
    env |= {
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": dsn,
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
        "LLM_MODEL": CHAT_MODEL,
        "SUMMARY_MODEL": SUMMARY_MODEL,
        "LLM_MAX_RETRIES": "0",
        "LLM_TIMEOUT": "10",
        # Memory work retried at once after a failure (tests own their timing).
        "MEMORY_RETRY_SECONDS": "0",
    }
    return env | extra


class Chat:
    """A running `tgagent chat`: lines go to its stdin, replies come back in a file.

    Output goes to files (`stdout.log`, `stderr.log`): a pipe nobody reads while the test
    sleeps could fill and stop the process mid-write.
    """

    def __init__(self, proc: subprocess.Popen[str], cwd: Path) -> None:
        self.proc, self.cwd = proc, cwd

    def send(self, *lines: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("".join(line + "\n" for line in lines))
        self.proc.stdin.flush()

    def output(self) -> list[str]:
        return (self.cwd / "stdout.log").read_text().splitlines()

    def errors(self) -> str:
        return (self.cwd / "stderr.log").read_text()

    async def replies(self, n: int, timeout: float = 120) -> list[str]:
        """Wait until `n` replies are printed (the turns are done) and return them."""
        deadline = time.monotonic() + timeout
        while len(self.output()) < n:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{len(self.output())} of {n} replies: {self.errors()}")
            await asyncio.sleep(0.05)
        return self.output()

    async def finish(self, timeout: float = 50) -> list[str]:
        """Close stdin (EOF ends the chat after background work) and return the replies."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = await asyncio.to_thread(self.proc.wait, timeout)
        assert code == 0, self.errors()
        return self.output()


@asynccontextmanager
async def chat_process(env: dict[str, str], cwd: Path, user_id: int) -> AsyncIterator[Chat]:
    """Run `tgagent chat --user-id <user_id> --lang en`; kill it if the test did not end it."""
    with open(cwd / "stdout.log", "w") as out, open(cwd / "stderr.log", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "src.cli", "chat", "--user-id", str(user_id), "--lang", "en"],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            env=env,
            cwd=cwd,
            text=True,
        )
    try:
        yield Chat(proc, cwd)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()


def memory_of(request: dict[str, Any]) -> str:
    """Return the `<memory>` section of a chat request's system message ("" if none)."""
    first = request["messages"][0]
    assert first["role"] == "system", first
    system = message_text(first)
    # The base prompt mentions the tags itself: the section is what follows it.
    assert system.startswith(prompts.SYSTEM_PROMPT), system
    rest = system[len(prompts.SYSTEM_PROMPT) :]
    if not rest:
        return ""
    opening, closing = f"\n\n{prompts.MEMORY_OPEN}\n", f"\n{prompts.MEMORY_CLOSE}"
    assert rest.startswith(opening) and rest.endswith(closing), rest
    return rest[len(opening) : -len(closing)]


def last_user_text(request: dict[str, Any]) -> str:
    """Return the last user message of a request, its `[i] User: ` label and stamp removed."""
    users = [m for m in request["messages"] if m["role"] == "user"]
    return strip_stamp(_LABEL.sub("", message_text(users[-1]), count=1)) if users else ""


async def user_conversations(pool: Any, owner: int) -> list[Any]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT id FROM conversations WHERE telegram_user_id = %s", (owner,)
        )
        return [r["id"] for r in await cur.fetchall()]


# --- (a) facts survive /new ---------------------------------------------------------------

FACTS = {
    "city": "Kazan",
    "dog": "Rex",
    "cat": "Murka",
    "car": "Volvo",
    "job": "pilot",
    "sister": "Olga",
    "brother": "Ivan",
    "boss": "Petrov",
    "school": "Lyceum 131",
    "bike": "Stels",
    "band": "Kino",
    "teacher": "Anna Lvovna",
    "street": "Baumana",
    "bank": "Ak Bars",
    "dentist": "Dr Salikhov",
}


@pytest.mark.slow
async def test_facts_survive_new(pool: Any, fresh_schema: str, llm: Any, tmp_path: Path) -> None:
    owner = 501
    ledger = Ledger()
    llm.default_for(SUMMARY_MODEL, ledger.reply)
    llm.default_reply = "Noted."
    question = "What do you remember about me?"
    # Fifteen facts: FACTS_EVERY (10) extracts some after the replies, /new the rest.
    said = [f"my {key} is {value}" for key, value in FACTS.items()]
    async with chat_process(chat_env(fresh_schema, llm), tmp_path, owner) as chat:
        chat.send(*said, "/new", question)
        lines = await chat.finish()
    assert len(lines) == len(said) + 2, lines
    assert lines[len(said)].startswith("Started a new conversation"), lines

    asked = llm.requests_for(CHAT_MODEL)[-1]
    assert last_user_text(asked) == question
    # The old conversation is gone from the context: only memory can carry the facts.
    assert [m for m in asked["messages"] if m["role"] == "user"] == [asked["messages"][-1]]
    memory = memory_of(asked)
    assert prompts.FACTS_HEADER in memory, memory
    # All fifteen fit MAX_FACTS_IN_PROMPT (30) and the facts layer's budget.
    missing = [k for k, v in FACTS.items() if f"- {k}: {v}\n" not in memory + "\n"]
    assert not missing, memory

    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT key, value FROM facts WHERE telegram_user_id = %s", (owner,)
        )
        assert {r["key"]: r["value"] for r in await cur.fetchall()} == FACTS


# --- (b) a summary that loses nothing -------------------------------------------------------

TURNS = 60
SQUASH_TURN = 30  # the chat model compresses positions 2-4 while answering u30
OUTAGE = range(20, 27)  # the summary model answers 500 after the turns u20..u26


@pytest.mark.slow
async def test_summary_loses_nothing(
    pool: Any, fresh_schema: str, llm: Any, tmp_path: Path
) -> None:
    owner = 502
    ledger = Ledger()
    turn = {"n": 0}
    faults: list[str] = []

    def chat_model(request: dict[str, Any]) -> Any:
        tokens = TOKEN.findall(last_user_text(request))
        turn["n"] = int(tokens[0][1:])
        answered = any(m["role"] == "tool" for m in request["messages"])
        if turn["n"] == SQUASH_TURN and not answered:
            args = {"from": 2, "to": 4, "summary": "S1"}
            return {"tool_calls": [{"name": "compress_range", "args": args}]}
        return "ok"  # no token of its own: only user messages and squashes carry them

    def summary_model(request: dict[str, Any]) -> Any:
        # Turns are one at a time per user and a turn's summarizer runs before the next
        # turn starts, so "the turn the chat model last answered" is the current one.
        if turn["n"] in OUTAGE:
            faults.append(message_text(request["messages"][0]))
            return Fault(500)  # not recorded: a failed request folded nothing
        return ledger.reply(request)

    llm.default_reply = chat_model
    llm.default_for(SUMMARY_MODEL, summary_model)
    # Its summarizer runs before the next turn starts: memory calls go at once, not
    # after the lines typed ahead (waiting for idle time: test_chat_one_slot.py).
    env = chat_env(
        fresh_schema, llm, MAX_CONTEXT="6", SUMMARY_TRIGGER="2", MEMORY_WAITS_FOR_REPLIES="never"
    )
    async with chat_process(env, tmp_path, owner) as chat:
        chat.send(*(f"u{i} tell me something about the weather" for i in range(1, TURNS + 1)))
        lines = await chat.finish()
    assert lines == ["ok"] * TURNS, chat.errors()
    assert prompts.SUMMARIZER_SYSTEM in faults, faults  # the outage hit the summarizer

    # The squash really happened: its log names the three messages the model saw at
    # positions 2-4 of the u30 request, and the model was told so.
    conversations = await user_conversations(pool, owner)
    assert len(conversations) == 1
    squash_turn = [r for r in llm.requests_for(CHAT_MODEL) if "u30 " in last_user_text(r)]
    assert len(squash_turn) == 2, squash_turn
    seen = [_LABEL.sub("", message_text(m), count=1) for m in squash_turn[0]["messages"][2:5]]
    told = [m for m in squash_turn[1]["messages"] if m["role"] == "tool"]
    assert message_text(told[-1]).startswith("Compressed positions 2-4"), told
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT l.summary, l.requested_by, array_agg(m.content ORDER BY m.created_at, m.id)"
            " AS texts FROM squash_log l JOIN messages m ON m.id = ANY(l.replaced_ids)"
            " WHERE l.conversation_id = %s GROUP BY l.id",
            (conversations[0],),
        )
        squashes = await cur.fetchall()
    assert [(s["summary"], s["requested_by"]) for s in squashes] == [("S1", "model")]
    assert squashes[0]["texts"] == seen
    await ledger.learn_squashes(pool, conversations)
    assert ledger.replaced["S1"] == [t for text in seen for t in TOKEN.findall(text)]

    # What we assert: every user message u1..u60 is in the final window (the last chat
    # request, u60's; a squash summary in it stands for what it replaced), or folded into
    # the summary that request carries, or both: the summary folds messages before they
    # leave the window.
    final = llm.requests_for(CHAT_MODEL)[-1]
    assert TOKEN.findall(last_user_text(final)) == [f"u{TURNS}"]
    in_window = {
        u for m in final["messages"][1:] for u in ledger.tokens(str(m.get("content") or ""))
    }
    folded = ledger.folded_in(final)
    lost = [u for u in (f"u{i}" for i in range(1, TURNS + 1)) if u not in in_window | folded]
    assert not lost, (lost, sorted(in_window, key=lambda u: int(u[1:])))
    # Never twice along the summaries that made the stored one.
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT summary FROM conversations WHERE id = %s", (conversations[0],)
        )
        stored = (await cur.fetchone())["summary"]
    assert max(ledger.folded_along(stored).values()) == 1, ledger.folded_along(stored)
    # The backlog of the outage was caught up: messages of those turns are summarized.
    assert all(f"u{i}" in folded for i in OUTAGE)


# --- (c) an idle session's compact in the next prompt ---------------------------------------

IDLE_MINUTES = 0.05  # 3 s of silence end a session (well above a busy turn)
SESSION = [
    "let's plan the garden",
    "tomatoes go by the fence",
    "the cucumbers need a greenhouse",
    "water them every evening",
    "remind me about the seeds",
]


@pytest.mark.slow
async def test_idle_session_compact_in_next_prompt(
    pool: Any, fresh_schema: str, llm: Any, tmp_path: Path
) -> None:
    owner = 503
    ledger = Ledger()
    llm.default_for(SUMMARY_MODEL, ledger.reply)
    llm.default_reply = "ok"
    later = "what about the roses"
    env = chat_env(fresh_schema, llm, SESSION_IDLE_MINUTES=str(IDLE_MINUTES))
    async with chat_process(env, tmp_path, owner) as chat:
        chat.send(*SESSION)
        await chat.replies(len(SESSION))  # the five turns are done, the silence starts
        await asyncio.sleep(IDLE_MINUTES * 60 + 1.0)
        chat.send(later)
        lines = await chat.finish()
    assert lines == ["ok"] * (len(SESSION) + 1), chat.errors()

    requests = llm.requests_for(CHAT_MODEL)
    assert [last_user_text(r) for r in requests] == [*SESSION, later]
    # Quick turns are one session: no compact before the silence.
    assert not any(prompts.PREVIOUS_CONVERSATIONS_HEADER in memory_of(r) for r in requests[:-1])

    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT conversation_id, summary, created_at FROM session_compacts"
            " WHERE telegram_user_id = %s",
            (owner,),
        )
        compacts = await cur.fetchall()
        cur = await conn.execute(
            "SELECT role, content, created_at FROM messages ORDER BY created_at, id"
        )
        messages = await cur.fetchall()
    assert len(compacts) == 1, compacts
    compact = compacts[0]
    # The silence ended the session of the first five turns: the compact is keyed by its
    # last message (the fifth reply) and made from its user lines, not the sixth.
    assert compact["conversation_id"] == (await user_conversations(pool, owner))[0]
    assert compact["created_at"] == messages[2 * len(SESSION) - 1]["created_at"]
    assert all(line in compact["summary"] for line in SESSION), compact
    assert later not in compact["summary"]

    # The sixth turn's prompt carries it, under "Previous conversations", in <memory>.
    memory = memory_of(requests[-1])
    assert prompts.PREVIOUS_CONVERSATIONS_HEADER in memory, memory
    previous = memory.split(prompts.PREVIOUS_CONVERSATIONS_HEADER, 1)[1]
    # (The plain compact, stored at once; the model's replaced it after the reply.)
    assert all(line in previous for line in SESSION) and later not in previous, memory
