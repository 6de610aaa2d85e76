"""Who may do what, through the real Application against the fake Bot API and real Postgres."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL, stored
from tests.e2e.test_bot_e2e import say
from tests.fakes.bot_api_server import FakeBotAPI

OPEN_WARNING = "the bot is open to everyone"


async def count(pool: Any, sql: str, *params: Any) -> Any:
    async with pool.connection() as conn:
        row = await (await conn.execute(sql, params)).fetchone()
        return row["n"] if row else None


async def test_an_open_bot_says_so_once_at_start(
    start_bot: Any, tg: FakeBotAPI, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="src.bot.app"):
        await start_bot()
    assert [r.getMessage() for r in caplog.records].count(
        "the bot is open to everyone: set ALLOWED_USER_IDS or ADMIN_USER_IDS to close it"
    ) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="src.bot.app"):
        await start_bot(admin_user_ids=[1])
        await start_bot(allowed_user_ids=[2])
    assert not [r for r in caplog.records if OPEN_WARNING in r.getMessage()]


async def test_only_a_groups_administrators_wipe_its_conversation(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    group, ann, bob = -100_610, 7601, 7602
    kw: dict[str, Any] = {"chat_type": "supergroup", "chat_id": group}
    await start_bot()
    tg.set_chat_admins(group, ann)
    llm.script_for(CHAT_MODEL, "Запомнил.")
    assert await say(tg, bob, "@tgagent_test_bot запомни: встреча в пятницу", **kw) == "Запомнил."
    before = await stored(pool, group)
    assert len(before) == 2

    answer = await say(tg, bob, "/new", language_code="en", **kw)
    assert answer == t("group_admins_only", "en")
    assert await say(tg, bob, "/forget", **kw) == t("group_admins_only", "ru")
    assert await stored(pool, group) == before  # nothing changed
    sql = "SELECT active_messages_count AS n FROM users WHERE telegram_user_id = %s"
    assert await count(pool, sql, group) is None  # /forget did not run either
    assert tg.calls_of("getChatMember")[0]["params"] == {"chat_id": group, "user_id": bob}

    assert await say(tg, ann, "/new", **kw) == t("new", "ru")
    assert await stored(pool, group) == []
