"""Load through the real Application: many users at once, nothing lost, nothing doubled.

The bot polls the fake Bot API; the fake model answers instantly with an echo of the
user's text, so every reply names the message it answers and the order can be checked
in Telegram and in the database alike.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

import pytest
from telegram.ext import AIORateLimiter

from src.bot.app import build_application, serve
from tests.e2e.conftest import BOT_TOKEN, SIDE_MODEL, RunningBot, wait_until_running
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.openai_server import message_text

logger = logging.getLogger(__name__)

USERS = 200
MESSAGES = 20  # each, within the default USER_RATE_LIMIT of 20 a minute
FIRST_USER = 20_000


def echo(request: dict[str, Any]) -> str:
    """Answer the chat model with "re: <the user's text>"; background models briefly."""
    if request.get("model") == SIDE_MODEL:  # fact extraction wants JSON, summaries text
        system = message_text(request["messages"][0])
        return "[]" if "JSON" in system else "(summary)"
    last = [m for m in request["messages"] if m["role"] == "user"][-1]
    return "re: " + message_text(last).rsplit("] ", 1)[-1]


async def start_unthrottled(runtime_factory: Any, tg: FakeBotAPI) -> RunningBot:
    """Start the bot without Telegram's 30 messages/s cap (the fake server has none).

    With the cap, 4000 replies would take at least 133 s whatever our code did; 429s are
    still retried.
    """
    runtime = await runtime_factory(
        telegram_bot_token=BOT_TOKEN,
        telegram_api_base_url=tg.base_url,
        summary_model=SIDE_MODEL,
        compact_model=SIDE_MODEL,
    )
    limiter = AIORateLimiter(overall_max_rate=0, group_max_rate=0, max_retries=3)
    app = build_application(runtime.settings, runtime, rate_limiter=limiter)
    stop = asyncio.Event()
    bot = RunningBot(app, runtime, stop, asyncio.create_task(serve(app, stop)))
    await wait_until_running(bot)
    return bot


async def wait_for_sent(tg: FakeBotAPI, count: int, timeout: float) -> None:
    """Wait until the fake server has delivered `count` messages, or `timeout` passed."""
    deadline = time.monotonic() + timeout
    while len(tg.sent) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


async def stored_by_owner(pool: Any) -> dict[int, list[tuple[str, str]]]:
    """Return every stored message as (role, content), per owner, in insertion order."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT c.telegram_user_id AS owner, m.role, m.content FROM messages m"
            " JOIN conversations c ON c.id = m.conversation_id ORDER BY m.id"
        )
        rows = await cur.fetchall()
    out: dict[int, list[tuple[str, str]]] = {}
    for row in rows:
        out.setdefault(int(row["owner"]), []).append((row["role"], row["content"]))
    return out


async def scalar(pool: Any, sql: str) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute(sql)).fetchone()
        return int(row["n"])


@pytest.mark.slow
@pytest.mark.timeout(1200)  # 4,000 turns on 2 shared CPUs: a figure, never a pass mark
async def test_200_users_x_20_messages(
    runtime_factory: Any, tg: FakeBotAPI, llm: Any, pool: Any, record_property: Any
) -> None:
    llm.default_reply = echo
    bot = await start_unthrottled(runtime_factory, tg)
    users = range(FIRST_USER, FIRST_USER + USERS)
    texts = {u: [f"u{u} m{i}" for i in range(MESSAGES)] for u in users}
    total = USERS * MESSAGES
    try:
        began, cpu = time.monotonic(), time.process_time()
        for i in range(MESSAGES):  # round-robin, as many users typing at once would
            for u in users:
                tg.push_text(u, texts[u][i])
        await wait_for_sent(tg, total, timeout=1080)  # within pytest-timeout, figures kept
        wall, cpu = time.monotonic() - began, time.process_time() - cpu
        await asyncio.sleep(0.3)  # anything doubled would arrive now
        await bot.runtime.service.drain()
    finally:
        await bot.close()

    replies = {u: tg.texts_to(u) for u in users}
    delivered = sum(len(r) for r in replies.values())
    distinct = sum(len(set(r)) for r in replies.values())
    lost = sum(len(set(texts[u]) - {r.removeprefix("re: ") for r in replies[u]}) for u in users)
    stored = await stored_by_owner(pool)
    user_rows = await scalar(pool, "SELECT count(*) AS n FROM messages WHERE role = 'user'")
    reply_rows = await scalar(pool, "SELECT count(*) AS n FROM messages WHERE role = 'assistant'")
    figures = {
        "users": USERS,
        "messages_sent": total,
        "replies_delivered": delivered,
        "lost": lost,
        "duplicated": delivered - distinct,
        "stored_user": user_rows,
        "stored_assistant": reply_rows,
        "wall_s": round(wall, 1),
        "turns_per_s": round(total / wall, 1),
        "cpu_ms_per_turn": round(1000 * cpu / total, 1),  # this process: bot, service, fakes
        "model_requests": len(llm.requests),
        "chat_actions": len(tg.actions),
    }
    for key, value in figures.items():
        record_property(key, value)
    logger.warning("load: %s", figures)

    assert (lost, delivered, distinct) == (0, total, total), figures
    assert Counter(m["method"] for m in tg.sent) == {"sendMessage": total}
    assert (user_rows, reply_rows) == (total, total)
    assert await scalar(pool, "SELECT count(*) AS n FROM conversations") == USERS
    assert await scalar(pool, "SELECT count(*) AS n FROM users") == USERS
    for u in users:
        assert replies[u] == [f"re: {text}" for text in texts[u]], u
        rows = stored[u]
        assert [role for role, _ in rows] == ["user", "assistant"] * MESSAGES, u
        assert [c.split("] ", 1)[1] for _, c in rows[::2]] == texts[u], u
        assert [c for _, c in rows[1::2]] == replies[u], u
