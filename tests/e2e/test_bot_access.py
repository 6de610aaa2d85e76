"""Who may do what, through the real Application against the fake Bot API and real Postgres."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from src.bot.jobs import send_reminders
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


async def test_jobs_leave_alone_a_user_removed_from_the_allowlist(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    gone, kept = 7611, 7612
    first = await start_bot(session_idle_minutes=1)
    llm.script_for(CHAT_MODEL, "Привет!", "Здравствуйте!")
    await say(tg, gone, "привет")
    await say(tg, kept, "привет")
    await first.close()
    # Restarted with `gone` no longer on the allowlist.
    bot = await start_bot(session_idle_minutes=1, allowed_user_ids=[kept])
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE users SET last_seen_at = last_seen_at - interval '25 hours'",
        )
        await conn.execute(
            "UPDATE conversations SET last_message_at = last_message_at - interval '2 hours'"
        )
    (job,) = bot.app.job_queue.get_jobs_by_name("compaction")
    await job.run(bot.app)
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT telegram_user_id, ended_at FROM conversations")
        ended = {r["telegram_user_id"]: r["ended_at"] is not None for r in await cur.fetchall()}
    assert ended == {gone: False, kept: True}

    sent_before = len(tg.sent)
    stats = await send_reminders(bot.app)
    assert (stats.due, stats.refused) == (2, 1)
    assert [m["chat_id"] for m in tg.sent[sent_before:]] == [kept]
