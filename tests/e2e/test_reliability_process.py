"""`tgagent bot` as a process: SIGTERM and SIGKILL in the middle of turns, secrets in logs."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CHAT_MODEL
from tests.e2e.conftest import stored as rows_of
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.openai_server import message_text

logger = logging.getLogger(__name__)

pytestmark = [pytest.mark.server, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# Distinctive values, so that any trace of them in the output is found.
TOKEN = "987654321:AAH-s3cr3t_TOKEN_zz9XqWv7"
API_KEY = "sk-proj-SECRET-api-key-0xDEADBEEF4242"


def bot_env(dsn: str, tg: FakeBotAPI, llm: Any, **extra: str) -> dict[str, str]:
    """Return an environment for `tgagent bot` on the test's schema and fake servers."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TELEGRAM_", "OPENAI_", "PG_", "LLM_", "LOG_"))
    }
    env.pop("TEST_DATABASE_URL", None)
    env |= {
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": dsn,
        "TELEGRAM_BOT_TOKEN": tg.token,
        "TELEGRAM_API_BASE_URL": tg.base_url,
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
        "LLM_MAX_RETRIES": "0",
        "SUMMARY_MODEL": "fake-model",
        "COMPACT_MODEL": "fake-model",
        # A killed process's jobs run again this long after its last heartbeat.
        "WORKER_STALLED_SECONDS": "3",
    }
    return env | extra


def start_process(
    command: str, env: dict[str, str], cwd: Path, name: str = ""
) -> subprocess.Popen[str]:
    """Start `python -m src.cli <command>` with its output appended to files in `cwd`
    (`<name>stdout.log`, `<name>stderr.log`): DEBUG logs would fill a pipe nobody reads
    and stop the process mid-write."""
    with open(cwd / f"{name}stdout.log", "a") as out, open(cwd / f"{name}stderr.log", "a") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "src.cli", command],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=err,
            text=True,
        )


@asynccontextmanager
async def bot_process(
    env: dict[str, str], tg: FakeBotAPI, cwd: Path, name: str = ""
) -> AsyncIterator[subprocess.Popen[str]]:
    """Run `tgagent bot` until it polls; kill it if the test did not end it."""
    polls = len(tg.calls_of("getUpdates"))
    proc = start_process("bot", env, cwd, name)
    try:
        deadline = time.monotonic() + 60
        while len(tg.calls_of("getUpdates")) == polls:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the bot did not start: {output(cwd, name)}")
            await asyncio.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# What procrastinate logs (at INFO, the default level) once its worker takes jobs.
WORKING = "Starting worker on queues"


@asynccontextmanager
async def worker_process(
    env: dict[str, str], cwd: Path, name: str = "worker-"
) -> AsyncIterator[subprocess.Popen[str]]:
    """Run `tgagent worker` until its queue worker runs (it never polls Telegram); kill
    it if the test did not end it. `name` prefixes its log files: one per process."""
    log = cwd / f"{name}stderr.log"
    started = log.read_text().count(WORKING) if log.exists() else 0
    proc = start_process("worker", env, cwd, name)
    try:
        deadline = time.monotonic() + 60
        while log.read_text().count(WORKING) == started:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the worker did not start: {output(cwd, name)}")
            await asyncio.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def output(cwd: Path, name: str = "") -> tuple[str, str]:
    """Return what the process wrote to stdout and stderr."""
    return (cwd / f"{name}stdout.log").read_text(), (cwd / f"{name}stderr.log").read_text()


async def terminate(proc: subprocess.Popen[str], timeout: float = 30) -> float:
    """Send SIGTERM; return how long the process took to exit."""
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    await asyncio.to_thread(proc.wait, timeout=timeout)
    return time.monotonic() - began


def exchanges(rows: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Split stored messages into exchanges, each opened by a user message.

    A whole exchange is a user message, its tool records if tools ran, and one reply; a
    turn that never finished leaves its user message alone. Anything else is half-written:
    tool records without the reply after them, or a reply without its user message.
    """
    assert not rows or rows[0][0] == "user", rows
    out: list[list[tuple[str, str]]] = []
    for row in rows:
        if row[0] == "user":
            out.append([row])
        else:
            out[-1].append(row)
    for exchange in out:
        roles = [role for role, _ in exchange]
        assert roles == ["user"] or roles[-1] == "assistant", exchange
    return out


async def say(api: FakeBotAPI, user: int, text: str) -> str:
    """Send a text as the user and return the bot's answer."""
    before = len(api.messages_to(user))
    api.push_text(user, text)
    return str((await api.await_messages(user, before + 1, timeout=20))[-1]["text"])


def replies(rows: list[tuple[str, str]]) -> list[str]:
    """Return the final reply of every finished exchange."""
    return [ex[-1][1] for ex in exchanges(rows) if len(ex) > 1]


async def inbox(pool: Any) -> tuple[int, int]:
    """Return how many updates the inbox holds, and how many of them are done."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n, count(done_at) AS done FROM inbox")
        row = await cur.fetchone()
    return int(row["n"]), int(row["done"])


async def wait_for_inbox(pool: Any, n: int, timeout: float = 20) -> None:
    """Wait until the inbox holds `n` updates."""
    deadline = time.monotonic() + timeout
    while (await inbox(pool))[0] < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the inbox holds {await inbox(pool)}, not {n} updates")
        await asyncio.sleep(0.02)


def unstamped(content: str) -> str:
    """Return a stored user message without its `[time] ` stamp."""
    return content.split("] ", 1)[-1]


def echo(request: dict[str, Any]) -> str:
    """Answer the chat model with "re: " and the user's text; the memory models with
    nothing ("[]": no facts, an empty summary)."""
    if request.get("model") != CHAT_MODEL:
        return "[]"
    users = [m for m in request["messages"] if m["role"] == "user"]
    # The model sees "User: [time] text" (a name, a time stamp): keep only the text.
    return "re: " + (message_text(users[-1]).rsplit("] ", 1)[-1] if users else "")


async def test_sigterm_mid_turn_finishes_the_turn_and_exits(
    pool: Any, fresh_schema: str, tg: FakeBotAPI, llm: Any, tmp_path: Path, record_property: Any
) -> None:
    plain, tooled, queued = 8201, 8202, 8203
    env = bot_env(fresh_schema, tg, llm)
    async with bot_process(env, tg, tmp_path) as proc:
        tg.push_text(plain, "разогрев")
        await tg.await_messages(plain, 1, timeout=30)
        # At SIGTERM: a turn between its tool round and its answer, two plain turns
        # waiting for the model, and a second message of one user waiting for its turn.
        llm.delay = 1.5
        llm.script_for(
            CHAT_MODEL,
            {"tool_calls": [{"name": "recall_previous_conversations", "args": {}}]},
            "Ответ после инструмента.",
        )
        tg.push_text(tooled, "вспомни прошлые разговоры")
        while len(llm.requests_for(CHAT_MODEL)) < 3:  # the warm-up, the tool call, the answer
            await asyncio.sleep(0.02)
        tg.push_text(plain, "первый вопрос")
        tg.push_text(plain, "второй вопрос")
        tg.push_text(queued, "третий пользователь")
        while llm.in_flight < 3:
            await asyncio.sleep(0.02)
        exit_s = await terminate(proc)
    _, err = output(tmp_path)
    assert proc.returncode == 0, err
    assert "Traceback" not in err

    users = (plain, tooled, queued)
    stored = {u: await rows_of(pool, u) for u in users}
    for u in users:  # every finished turn was delivered once; none is half-written
        assert tg.texts_to(u) == replies(stored[u]), (u, stored[u])
    roles = [role for role, _ in stored[tooled]]
    assert roles == ["user", "assistant", "tool", "system", "assistant"]
    sent = 5
    answered = sum(len(tg.texts_to(u)) for u in users)
    # The three turns in flight finished; the message waiting for its chat's turn did
    # not start: it stays in the inbox, unanswered and not stored, for the next process.
    assert answered == sent - 1 and len(tg.texts_to(plain)) == 2
    assert await inbox(pool) == (sent, sent - 1)
    assert len(exchanges(stored[plain])) == 2

    llm.delay = 0.0
    llm.default_reply = echo
    async with bot_process(env, tg, tmp_path) as proc:
        await tg.await_messages(plain, 3, timeout=30)
        await terminate(proc)
    assert proc.returncode == 0
    assert tg.texts_to(plain)[2] == "re: второй вопрос"
    stored = {u: await rows_of(pool, u) for u in users}
    for u in users:
        assert tg.texts_to(u) == replies(stored[u]), (u, stored[u])
    assert await inbox(pool) == (sent, sent)
    figures = {
        "turns_in_flight_or_queued": 4,
        "messages_sent": sent,
        "answered_before_exit": answered,
        "answered_after_restart": sum(len(tg.texts_to(u)) for u in users) - answered,
        "user_messages_stored": sum(len(exchanges(rows)) for rows in stored.values()),
        "half_written": 0,
        "exit_s": round(exit_s, 2),
    }
    for key, value in figures.items():
        record_property(key, value)
    logger.warning("SIGTERM mid-turn: %s", figures)
    assert sum(len(tg.texts_to(u)) for u in users) == sent and exit_s < 10


async def test_sigkill_mid_turn_answers_every_message_once_after_a_restart(
    pool: Any, fresh_schema: str, tg: FakeBotAPI, llm: Any, tmp_path: Path, record_property: Any
) -> None:
    """Killed outright (OOM, a supervisor out of patience) while the model thinks: the
    user's messages are stored, nothing else of their turns; the next process answers the
    messages in flight and the one queued behind them, once each, in order, on the user
    messages already stored (none stored twice)."""
    plain, tooled = 8211, 8212
    env = bot_env(fresh_schema, tg, llm)
    async with bot_process(env, tg, tmp_path) as proc:
        llm.script_for(
            CHAT_MODEL, {"tool_calls": [{"name": "recall_previous_conversations", "args": {}}]}
        )
        llm.delay_next(1, 0.0)  # the tool call comes at once, everything after hangs
        llm.delay = 30.0
        tg.push_text(tooled, "вспомни прошлые разговоры")
        while len(llm.requests_for(CHAT_MODEL)) < 2:  # the tool ran; its answer is awaited
            await asyncio.sleep(0.02)
        tg.push_text(plain, "важный вопрос")
        tg.push_text(plain, "вопрос в очереди")  # waits for the turn before it
        while llm.in_flight < 2:
            await asyncio.sleep(0.02)
        await wait_for_inbox(pool, 3)
        proc.kill()
        await asyncio.to_thread(proc.wait, 10)
    stored = {u: await rows_of(pool, u) for u in (plain, tooled)}
    assert [role for role, _ in stored[tooled]] == ["user"]  # no tool records without a reply
    assert [role for role, _ in stored[plain]] == ["user"]
    assert await inbox(pool) == (3, 0)
    assert tg.texts_to(plain) == tg.texts_to(tooled) == []

    llm.delay = 0.0
    llm.default_reply = echo
    before = len(llm.requests_for(CHAT_MODEL))
    async with bot_process(env, tg, tmp_path) as proc:
        began = time.monotonic()
        tg.push_text(plain, "ты тут?")
        await tg.await_messages(plain, 3, timeout=30)
        await tg.await_messages(tooled, 1, timeout=30)
        answered_in = time.monotonic() - began  # WORKER_STALLED_SECONDS, not a lease of minutes
        await asyncio.sleep(1.0)  # time enough for a duplicate to show
        exit_s = await terminate(proc)
    assert proc.returncode == 0
    said = ["важный вопрос", "вопрос в очереди", "ты тут?"]
    assert tg.texts_to(plain) == [f"re: {text}" for text in said]
    assert tg.texts_to(tooled) == ["re: вспомни прошлые разговоры"]
    rows = await rows_of(pool, plain)
    assert [role for role, _ in rows] == ["user", "assistant"] * 3
    assert [unstamped(c) for role, c in rows if role == "user"] == said  # each stored once
    rows = await rows_of(pool, tooled)
    assert [role for role, _ in rows] == ["user", "assistant"]  # the user's message once
    # ...and the second run's model saw it once, without the dead run's tool call.
    second = llm.requests_for(CHAT_MODEL)[before:]
    asked = [r["messages"] for r in second if "вспомни" in message_text(r["messages"][-1])]
    assert len(asked) == 1, asked
    seen = [message_text(m) for m in asked[0]]
    assert sum("вспомни прошлые разговоры" in text for text in seen) == 1, seen
    assert not any("recall_previous_conversations" in text for text in seen), seen
    assert await inbox(pool) == (4, 4)
    figures = {
        "killed_mid_turn": 2,
        "queued_at_kill": 1,
        "answered_after_restart": len(tg.texts_to(plain)) + len(tg.texts_to(tooled)),
        "user_messages_stored": 4,
        "tool_records_left": 0,
        "half_written": 0,
        "next_process_answered_s": round(answered_in, 2),
        "exit_s": round(exit_s, 2),
    }
    for key, value in figures.items():
        record_property(key, value)
    logger.warning("SIGKILL mid-turn: %s", figures)


async def test_debug_logs_of_a_whole_session_hold_no_secret(
    pool: Any, fresh_schema: str, llm: Any, tmp_path: Path, record_property: Any
) -> None:
    user = 8301
    with FakeBotAPI(TOKEN) as api:
        env = bot_env(fresh_schema, api, llm, OPENAI_API_KEY=API_KEY, LOG_LEVEL="DEBUG")
        async with bot_process(env, api, tmp_path) as proc:
            llm.script_for(
                CHAT_MODEL,
                {"tool_calls": [{"name": "search_history", "args": {"query": "чай"}}]},
                "Нашёл.",
                "Ответ после 429.",
            )
            for text in ("/start", "найди про чай", "/help", "/memory"):
                await say(api, user, text)
            api.fail_next("sendMessage", 1, 429, retry_after=1)
            await say(api, user, "ещё")
            llm.fail_next(1, status=500)  # the model fails: a clear answer
            await say(api, user, "и ещё")
            api.fail_next("sendMessage", 1, 401, "Unauthorized")  # Telegram refuses the token
            await say(api, user, "снова")
            api.stop()  # the Bot API goes away for a moment: connection errors get logged
            api.push_text(user, "после сбоя")
            await asyncio.sleep(1.2)
            api.start()
            await api.await_messages(user, 8, timeout=40)
            exit_s = await terminate(proc)
    out, err = output(tmp_path)
    assert proc.returncode == 0, err
    captured = out + err
    lines = captured.count("\n")
    assert " DEBUG " in captured
    # The failures really were logged (as one-line warnings: the receiver and the outbox
    # handle them, no traceback comes out of PTB's updater any more).
    for failure in ("getUpdates failed", "not sent (Unauthorized)", "model failure"):
        assert failure in captured, failure
    assert "/bot***" in captured  # a Bot API URL was logged, and masked
    secret_part = TOKEN.split(":", 1)[1]
    leaks = {s: captured.count(s) for s in (TOKEN, secret_part, API_KEY, API_KEY[-12:])}
    figures = {"log_lines": lines, "log_bytes": len(captured), "exit_s": round(exit_s, 2)}
    figures |= {"token_hits": leaks[TOKEN] + leaks[secret_part]}
    figures |= {"api_key_hits": leaks[API_KEY] + leaks[API_KEY[-12:]]}
    for key, value in figures.items():
        record_property(key, value)
    logger.warning("secrets: %s", figures)
    assert not any(leaks.values()), leaks
