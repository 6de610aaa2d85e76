"""Reminders (seed 000's remind_of_yourself) sent by the running bot, stored, never twice."""

from __future__ import annotations

from typing import Any

from src.bot.jobs import send_reminders
from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.openai_server import message_text


async def go_quiet(pool: Any, owner: int, hours: float = 25) -> None:
    """Move the owner's timeline `hours` into the past, as if they had been silent since."""
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE users SET last_seen_at = last_seen_at - make_interval(hours => %s),"
            " last_reminded_at = last_reminded_at - make_interval(hours => %s)"
            " WHERE telegram_user_id = %s",
            (hours, hours, owner),
        )


async def user_row(pool: Any, owner: int) -> dict[str, Any]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM users WHERE telegram_user_id = %s", (owner,))
        row = await cur.fetchone()
        assert row is not None
        return dict(row)


async def last_stored(pool: Any, owner: int) -> tuple[str, str]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT m.role, m.content FROM messages m JOIN conversations c"
            " ON c.id = m.conversation_id WHERE c.telegram_user_id = %s ORDER BY m.id DESC",
            (owner,),
        )
        row = await cur.fetchone()
        return row["role"], row["content"]


async def chat(tg: FakeBotAPI, owner: int, text: str, **kw: Any) -> None:
    before = len(tg.messages_to(kw.get("chat_id", owner)))
    tg.push_text(owner, text, **kw)
    await tg.await_messages(kw.get("chat_id", owner), before + 1)


async def test_reminder_written_from_memory_sent_once_and_stored(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    bot = await start_bot(remind_after_hours=24)
    assert bot.app.job_queue.get_jobs_by_name("reminders")
    owner = 7401
    llm.script_for(CHAT_MODEL, "Зелёный чай — отличный выбор.")
    await chat(tg, owner, "Я люблю зелёный чай")
    assert (await send_reminders(bot.app)).due == 0  # not silent long enough yet

    await go_quiet(pool, owner)
    llm.script_for(CHAT_MODEL, "Как поживает ваш зелёный чай?")
    stats = await send_reminders(bot.app)
    assert (stats.due, stats.sent) == (1, 1)
    assert tg.texts_to(owner)[-1] == "Как поживает ваш зелёный чай?"
    prompt = " ".join(message_text(m) for m in llm.requests_for(CHAT_MODEL)[-1]["messages"])
    assert "Я люблю зелёный чай" in prompt and "Russian" in prompt
    assert await last_stored(pool, owner) == ("assistant", "Как поживает ваш зелёный чай?")

    # Never twice for one silence.
    assert (await send_reminders(bot.app)).due == 0
    assert len(tg.texts_to(owner)) == 2

    # The next silence gets its own reminder; a failing model gives the template.
    await chat(tg, owner, "Снова я")
    await go_quiet(pool, owner)
    llm.fail_next(1, status=500)
    stats = await send_reminders(bot.app)
    assert (stats.sent, stats.templates) == (0, 1)
    assert tg.texts_to(owner)[-1] == t("reminder", "ru")
    assert await last_stored(pool, owner) == ("assistant", t("reminder", "ru"))


async def test_muted_blocked_and_group_chats_are_not_reminded(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    bot = await start_bot()
    muted, blocked, group = 7402, 7403, -100300
    await chat(tg, muted, "привет")
    await chat(tg, muted, "/mute")
    await chat(tg, blocked, "привет")
    await chat(tg, 7404, "@tgagent_test_bot привет", chat_type="group", chat_id=group)
    for owner in (muted, blocked, group):
        await go_quiet(pool, owner)
    tg.block_user(blocked)
    sent_before = len(tg.sent)

    stats = await send_reminders(bot.app)
    assert (stats.due, stats.unreachable, stats.skipped, stats.sent) == (2, 1, 1, 0)
    assert len(tg.sent) == sent_before
    # Unreachable, which is not muted: /mute stays the user's own choice.
    gone = await user_row(pool, blocked)
    assert gone["unreachable_since"] is not None and gone["remind_of_yourself"] == "1"
    assert await last_stored(pool, blocked) != ("assistant", t("reminder", "ru"))
    assert (await user_row(pool, group))["last_reminded_at"] is not None
    assert (await send_reminders(bot.app)).due == 0
