"""/usage, /usage all and token budgets through the real bot Application, the fake Bot
API, the fake model and real PostgreSQL."""

from __future__ import annotations

from typing import Any

from src.services.texts import t
from src.services.turn_types import Identity
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
    assert answer.startswith("You have used up your budget") and "00:00" in answer
    assert len(llm.requests) == sent  # no model call
    assert answer in await outbox_texts(pool, ANN)
    assert [role for role, _ in await stored(pool, ANN)][-1] == "user"
    await say(tg, ADMIN, "hello", language_code="en")  # over 20 tokens already
    llm.script_for(CHAT_MODEL, "Admins have no budget.")
    assert await say(tg, ADMIN, "again", language_code="en") == "Admins have no budget."


GROUP = -100_555_000
TOOL_CALL = {"tool_calls": [{"name": "search_history", "args": {"query": "cat"}}]}


def in_group(user: int, text: str) -> dict[str, Any]:
    """Return `say`'s arguments for a mention of the bot by `user` in GROUP."""
    return {
        "user": user,
        "text": f"@tgagent_test_bot {text}",
        "chat_id": GROUP,
        "chat_type": "group",
        "language_code": "en",
    }


async def test_a_new_group_is_no_fresh_budget(start_bot: Any, tg: FakeBotAPI, llm: Any) -> None:
    """Issue 34: a user who spent their budget created a group and had a fresh one."""
    await start_bot(user_daily_tokens=20, allowed_user_ids=[ANN, BEN])
    llm.script_for(CHAT_MODEL, "First answer.")
    assert await say(tg, ANN, "hello", language_code="en") == "First answer."
    sent = len(llm.requests)
    refused = await say(tg, **in_group(ANN, "hello everyone"))
    assert refused.startswith("You have used up your budget") and len(llm.requests) == sent
    # Ben spends in the group (Ann's refusal did not): his own budget is spent too.
    llm.script_for(CHAT_MODEL, "Hi Ben.")
    await say(tg, **in_group(BEN, "hi"))
    assert (await say(tg, BEN, "and me?", language_code="en")).startswith(
        "You have used up your budget"
    )


async def test_a_turn_stops_when_its_budget_runs_out(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    """The budget is checked before every model call of a turn, not only its first."""
    await start_bot(user_daily_tokens=100, allowed_user_ids=[ANN])
    llm.script_for(CHAT_MODEL, TOOL_CALL, "Your cat is Barsik.")
    answer = await say(tg, ANN, "what is my cat called?", language_code="en")
    assert "Barsik" not in answer and len(llm.requests_for(CHAT_MODEL)) == 1
    assert answer.startswith(t("budget_ran_out", "en", when="")[:40]) and "00:00" in answer


async def test_warned_once_at_80_percent(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    """A budget 80% spent is said once, after the reply that spent it."""
    bot = await start_bot(allowed_user_ids=[ANN, BEN], user_daily_tokens=10**9)
    llm.script_for(CHAT_MODEL, "Hi!", "Hi!")
    await say(tg, BEN, "hello", language_code="en")
    await bot.runtime.service.drain()
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT sum(input_tokens + output_tokens) AS n FROM llm_calls WHERE owner_id = %s",
            (BEN,),
        )
        turn = int((await cur.fetchone())["n"])
    # Ann's turn is Ben's, letter for letter: 90% of the budget.
    bot.runtime.settings.user_daily_tokens = round(turn / 0.9)
    before = len(tg.messages_to(ANN))
    tg.push_text(ANN, "hello", language_code="en")
    reply, warning = (m["text"] for m in (await tg.await_messages(ANN, before + 2))[-2:])
    assert reply == "Hi!"
    assert warning.startswith(("89%", "90%")) and "of the daily token budget is used" in warning
    assert await bot.runtime.service.budget_warnings(Identity(ANN, sender_id=ANN)) == []
