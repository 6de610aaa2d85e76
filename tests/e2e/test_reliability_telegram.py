"""Telegram faults through the real Application: 429s, refused formatting, a user who
blocked the bot, and a Bot API that goes away and comes back."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from src.bot.app import FLOOD_RETRIES
from src.bot.formatting import reply_parts
from src.bot.jobs import send_reminders
from src.services.texts import t
from tests.e2e.conftest import BOT_TOKEN, CHAT_MODEL, until
from tests.fakes.bot_api_server import FakeBotAPI

logger = logging.getLogger(__name__)


async def say(tg: FakeBotAPI, user: int, text: str, timeout: float = 10.0) -> str:
    """Send a text as the user and return the bot's (single) answer."""
    before = len(tg.messages_to(user))
    tg.push_text(user, text)
    return str((await tg.await_messages(user, before + 1, timeout))[-1]["text"])


def attempts_to(tg: FakeBotAPI, method: str, chat_id: int) -> list[dict[str, Any]]:
    """Return every call of `method` for one chat, failed ones included."""
    return [c for c in tg.calls_of(method) if c["params"].get("chat_id") == chat_id]


async def stored(pool: Any, owner: int) -> list[tuple[str, str]]:
    """Return (role, text) of the owner's messages in order, user texts without their stamp."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT m.role, m.content FROM messages m JOIN conversations c"
            " ON c.id = m.conversation_id WHERE c.telegram_user_id = %s ORDER BY m.id",
            (owner,),
        )
        rows = await cur.fetchall()
    return [
        (r["role"], r["content"].split("] ", 1)[1] if r["role"] == "user" else r["content"])
        for r in rows
    ]


def record(record_property: Any, case: str, **figures: Any) -> None:
    """Keep a case's figures in the test report and the log."""
    for key, value in figures.items():
        record_property(key, value)
    logger.warning("%s: %s", case, figures)


@pytest.mark.slow
async def test_429s_in_a_row_deliver_the_reply_once(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any, record_property: Any
) -> None:
    user = 8101
    await start_bot()
    llm.script_for(CHAT_MODEL, "Дошло после трёх 429.", "Дошло после шести 429.", "Снова на связи.")
    tg.fail_next("sendMessage", FLOOD_RETRIES, 429, retry_after=1)
    began = time.monotonic()
    assert await say(tg, user, "раз", timeout=15) == "Дошло после трёх 429."
    delivered_in = time.monotonic() - began
    first = attempts_to(tg, "sendMessage", user)
    assert len(first) == FLOOD_RETRIES + 1
    gaps = [b["time"] - a["time"] for a, b in zip(first, first[1:], strict=False)]
    assert min(gaps) >= 1.0  # each retry waited retry_after

    # Six 429s on one reply, twice what the rate limiter retries by itself: the outbox
    # waits each retry_after and delivers it once; the next message waits its turn.
    tg.fail_next("sendMessage", 6, 429, retry_after=1)
    tg.push_text(user, "два")
    tg.push_text(user, "три")
    await tg.await_messages(user, 3, timeout=30)
    await asyncio.sleep(0.5)
    assert len(attempts_to(tg, "sendMessage", user)) == FLOOD_RETRIES + 1 + 6 + 1 + 1

    assert tg.texts_to(user) == [
        "Дошло после трёх 429.",
        "Дошло после шести 429.",
        "Снова на связи.",
    ]
    assert await stored(pool, user) == [
        ("user", "раз"),
        ("assistant", "Дошло после трёх 429."),
        ("user", "два"),
        ("assistant", "Дошло после шести 429."),
        ("user", "три"),
        ("assistant", "Снова на связи."),
    ]
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT status, cardinality(sent_ids) AS parts FROM outbox WHERE chat_id = %s"
            " ORDER BY update_id",
            (user,),
        )
        assert [(r["status"], r["parts"]) for r in await cur.fetchall()] == [("sent", 1)] * 3
    record(
        record_property,
        "429",
        messages_sent=3,
        delivered=3,
        duplicated=0,
        send_attempts=len(attempts_to(tg, "sendMessage", user)),
        delivered_after_3x429_s=round(delivered_in, 2),
    )


async def test_refused_formatting_falls_back_to_plain_text(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any, record_property: Any
) -> None:
    user = 8102
    # Room for the long reply below under its output cap, which the fake server honours;
    # not streamed: on a loaded machine a slow turn's live message is one more sendMessage.
    await start_bot(
        telegram_reply_format="markdown", llm_max_output_tokens=4096, stream_replies=False
    )
    tg.reject_parse_mode = True  # every formatted message is refused
    paragraphs = [f"**Часть {i}.** " + "Текст с `кодом` и *курсивом*. " * 70 for i in range(3)]
    paragraphs = [p.strip() for p in paragraphs]
    long_reply = "\n\n".join(paragraphs)
    pieces = [part.text for part in reply_parts(long_reply, "markdown")]
    assert len(pieces) >= 2 and not any("**" in piece for piece in pieces)
    llm.script_for(CHAT_MODEL, long_reply, "**Ответ**, который Telegram не примет.", "Ясно.")

    tg.push_text(user, "подробно")
    answers = await tg.await_messages(user, len(pieces))
    assert [m["text"] for m in answers] == pieces
    assert not any("entities" in m["params"] for m in answers)
    # Formatted, then the same text unformatted.
    assert len(attempts_to(tg, "sendMessage", user)) == 2 * len(pieces)

    # A 400 that is not about formatting: the error handler says so in one sentence.
    tg.reject_parse_mode = False
    tg.fail_next("sendMessage", 1, 400, "Bad Request: wrong something")
    assert await say(tg, user, "ещё") == t("internal_error", "ru")
    assert await say(tg, user, "и ещё") == "Ясно."
    rows = await stored(pool, user)
    assert [role for role, _ in rows] == ["user", "assistant"] * 3
    assert rows[1] == ("assistant", long_reply)
    record(
        record_property,
        "400 formatting",
        reply_chars=len(long_reply),
        pieces=len(pieces),
        send_attempts=2 * len(pieces),
        delivered_plain=len(answers),
        lost=0,
    )


async def test_a_blocked_bot_costs_one_attempt_and_pauses_reminders(
    start_bot: Any,
    tg: FakeBotAPI,
    llm: Any,
    pool: Any,
    caplog: pytest.LogCaptureFixture,
    record_property: Any,
) -> None:
    user = 8103
    bot = await start_bot()
    llm.script_for(CHAT_MODEL, "Привет!", "Не дойдёт.", "Тоже не дойдёт.")
    assert await say(tg, user, "привет") == "Привет!"
    tg.block_user(user)
    with caplog.at_level(logging.INFO, logger="src"):
        tg.push_text(user, "последнее слово")
        tg.push_text(user, "и ещё одно")
        await until(lambda: len(attempts_to(tg, "sendMessage", user)) == 3)
        await until(
            lambda: sum("cannot write to the chat" in r.getMessage() for r in caplog.records) == 2
        )
        await asyncio.sleep(0.3)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(attempts_to(tg, "sendMessage", user)) == 3  # one per reply, no retries
    actions = len(attempts_to(tg, "sendChatAction", user))
    assert actions <= 3
    assert [role for role, _ in await stored(pool, user)] == ["user", "assistant"] * 3

    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT remind_of_yourself, unreachable_since FROM users WHERE telegram_user_id = %s",
            (user,),
        )
        row = await cur.fetchone()
        # Unreachable until it writes again, not muted: /mute is the user's choice alone.
        assert row["unreachable_since"] is not None and row["remind_of_yourself"] == "1"
        await conn.execute(
            "UPDATE users SET last_seen_at = last_seen_at - interval '30 hours'"
            " WHERE telegram_user_id = %s",
            (user,),
        )
    stats = await send_reminders(bot.app)
    assert stats.due == 0
    assert len(attempts_to(tg, "sendMessage", user)) == 3
    record(
        record_property,
        "403 blocked",
        messages_after_block=2,
        send_attempts=2,
        chat_actions=actions,
        stored_exchanges=3,
        reminders_due_after=stats.due,
    )


@pytest.mark.slow
async def test_polling_recovers_from_a_bot_api_outage(
    start_bot: Any, llm: Any, pool: Any, record_property: Any
) -> None:
    user = 8104
    with FakeBotAPI(BOT_TOKEN) as api:
        bot = await start_bot(telegram_api_base_url=api.base_url)
        llm.script_for(CHAT_MODEL, "До сбоя.", "Во время сбоя.", "Ответ пережил сбой.")
        assert await say(api, user, "раз") == "До сбоя."

        # Telegram is unreachable while the user writes: polling fails and keeps trying.
        api.stop()
        api.push_text(user, "два")
        await asyncio.sleep(1.5)
        api.start()  # the same port
        up = time.monotonic()
        await api.await_messages(user, 2, timeout=40)
        polling_recovered_in = time.monotonic() - up

        # Telegram goes away while a turn is in flight: the reply waits for it.
        llm.delay_next(1, 0.8)
        api.push_text(user, "три")
        await until(lambda: len(llm.requests_for(CHAT_MODEL)) == 3)
        api.stop()
        await asyncio.sleep(1.5)
        api.start()
        up = time.monotonic()
        await api.await_messages(user, 3, timeout=40)
        reply_recovered_in = time.monotonic() - up
        await asyncio.sleep(0.3)
        texts = api.texts_to(user)
        await bot.close()  # before the server goes for good
    assert texts == ["До сбоя.", "Во время сбоя.", "Ответ пережил сбой."]
    assert [role for role, _ in await stored(pool, user)] == ["user", "assistant"] * 3
    record(
        record_property,
        "Bot API outage",
        messages_sent=3,
        answered=len(texts),
        lost=3 - len(texts),
        outage_s=1.5,
        polling_recovered_s=round(polling_recovered_in, 2),
        reply_recovered_s=round(reply_recovered_in, 2),
    )
