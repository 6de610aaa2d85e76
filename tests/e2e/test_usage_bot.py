"""/usage, /usage all and token budgets through the real bot Application, the fake Bot
API, the fake model and real PostgreSQL."""

from __future__ import annotations

from typing import Any

from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL, stored
from tests.e2e.test_bot_e2e import say
from tests.fakes.bot_api_server import FakeBotAPI

ANN, BEN, ADMIN = 7101, 7102, 7103


async def outbox_texts(pool: Any, chat_id: int) -> list[str]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT text FROM outbox WHERE chat_id = %s ORDER BY 1", (chat_id,)
        )
        return [r["text"] for r in await cur.fetchall()]


async def test_usage_commands(start_bot: Any, tg: FakeBotAPI, llm: Any) -> None:
    bot = await start_bot(
        admin_user_ids=[ADMIN],
        allowed_user_ids=[ANN, BEN],
        model_prices={CHAT_MODEL: {"input": 1.0, "output": 2.0}},
    )
    assert (await say(tg, ANN, "/usage", language_code="en")).splitlines()[1:] == [
        "Last answer: nothing",
        "Today: nothing",
        "This month: nothing",
    ]
    llm.script_for(CHAT_MODEL, "Hello, Ann!")
    await say(tg, ANN, "hello", first_name="Ann", username="ann")
    await bot.runtime.service.drain()
    text = await say(tg, ANN, "/usage", language_code="en")
    assert text.splitlines()[0] == t("usage_title", "en")
    assert text.splitlines()[1].startswith("Last answer: ") and "≈ $0.0" in text
    assert "Сегодня: " in await say(tg, ANN, "/usage", language_code="ru")
    assert await say(tg, BEN, "/usage all", language_code="en") == t("usage_admins_only", "en")
    top = await say(tg, ADMIN, "/usage all", language_code="en")
    lines = top.splitlines()
    assert lines[0] == t("usage_top_today", "en") and lines[1].startswith("1. @ann: ")
    assert t("usage_top_month", "en") in lines


async def test_over_budget_answered_through_the_outbox(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot(user_daily_tokens=20, admin_user_ids=[ADMIN], allowed_user_ids=[ANN])
    llm.script_for(CHAT_MODEL, "First answer.")
    assert await say(tg, ANN, "hello", language_code="en") == "First answer."
    sent = len(llm.requests)
    answer = await say(tg, ANN, "one more", language_code="en")
    assert answer.startswith("You have used up your token budget") and "00:00" in answer
    assert len(llm.requests) == sent  # no model call
    assert answer in await outbox_texts(pool, ANN)
    assert [role for role, _ in await stored(pool, ANN)][-1] == "user"
    await say(tg, ADMIN, "hello", language_code="en")  # over 20 tokens already
    llm.script_for(CHAT_MODEL, "Admins have no budget.")
    assert await say(tg, ADMIN, "again", language_code="en") == "Admins have no budget."
