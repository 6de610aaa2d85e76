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

from tests.e2e.conftest import CHAT_MODEL
from tests.e2e.conftest import stored as rows_of
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.openai_server import message_text

logger = logging.getLogger(__name__)

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
    }
    return env | extra


@asynccontextmanager
async def bot_process(
    env: dict[str, str], tg: FakeBotAPI, cwd: Path
) -> AsyncIterator[subprocess.Popen[str]]:
    """Run `tgagent bot` until it polls; kill it if the test did not end it.

    Its output goes to files (`stdout.log`, `stderr.log` in `cwd`): DEBUG logs would fill
    a pipe nobody reads and stop the bot mid-write.
    """
    polls = len(tg.calls_of("getUpdates"))
    with open(cwd / "stdout.log", "w") as out, open(cwd / "stderr.log", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "src.cli", "bot"],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=err,
            text=True,
        )
    try:
        deadline = time.monotonic() + 60
        while len(tg.calls_of("getUpdates")) == polls:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the bot did not start: {output(cwd)}")
            await asyncio.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def output(cwd: Path) -> tuple[str, str]:
    """Return what the bot wrote to stdout and stderr."""
    return (cwd / "stdout.log").read_text(), (cwd / "stderr.log").read_text()


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
    figures = {
        "turns_in_flight_or_queued": 4,
        "messages_sent": sent,
        "user_messages_stored": sum(len(exchanges(rows)) for rows in stored.values()),
        "answered": answered,
        "half_written": 0,
        "exit_s": round(exit_s, 2),
    }
    for key, value in figures.items():
        record_property(key, value)
    logger.warning("SIGTERM mid-turn: %s", figures)
    assert answered == sent and exit_s < 10


async def test_sigkill_mid_turn_leaves_no_half_written_exchange(
    pool: Any, fresh_schema: str, tg: FakeBotAPI, llm: Any, tmp_path: Path, record_property: Any
) -> None:
    """Killed outright (OOM, a supervisor out of patience) while the model thinks: the
    user's message is stored, nothing else of the turn, and the next process carries on."""
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
        while llm.in_flight < 2:
            await asyncio.sleep(0.02)
        proc.kill()
        await asyncio.to_thread(proc.wait, 10)
    stored = {u: await rows_of(pool, u) for u in (plain, tooled)}
    assert [role for role, _ in stored[tooled]] == ["user"]  # no tool records without a reply
    assert [role for role, _ in stored[plain]] == ["user"]

    llm.delay = 0.0
    llm.script_for(CHAT_MODEL, "Да, я тут.")
    async with bot_process(env, tg, tmp_path) as proc:
        began = time.monotonic()
        tg.push_text(plain, "ты тут?")
        await tg.await_messages(plain, 1, timeout=30)
        answered_in = time.monotonic() - began  # not the 120 s the dead turn's lease had left
        exit_s = await terminate(proc)
    assert proc.returncode == 0
    assert tg.texts_to(plain) == ["Да, я тут."]
    request = " ".join(message_text(m) for m in llm.requests_for(CHAT_MODEL)[-1]["messages"])
    assert "важный вопрос" in request  # the unanswered message is in the history
    rows = await rows_of(pool, plain)
    assert [role for role, _ in rows] == ["user", "user", "assistant"]
    figures = {
        "killed_mid_turn": 2,
        "user_messages_stored": 2,
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
    assert " DEBUG " in captured and "Traceback" in captured  # errors really were logged
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
