"""A chat that blocked the bot is unreachable, which is not muted: nothing is sent to it
meanwhile, what comes due for it is kept (a one-time task's answer) or counted as missed
(a repeating task's slots), and its next message brings it back. The real Application
against the fake Bot API (`block_user`: 403 "Forbidden: bot was blocked by the user" for
every send to the chat until `unblock_user`, as Telegram answers), the fake model and
real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from src.bot.jobs import send_reminders
from src.services.texts import t
from src.storage.tasks_repo import TaskRepository
from tests.e2e.conftest import CHAT_MODEL, until
from tests.e2e.test_bot_reminders import chat, go_quiet, user_row
from tests.e2e.test_reliability_telegram import attempts_to
from tests.e2e.test_scheduled_tasks import schedule
from tests.fakes.bot_api_server import FakeBotAPI

ANN, BOB, CID = 4101, 4102, 4103
ZONE = ZoneInfo("Europe/Moscow")  # TIMEZONE's default: the users here chose none
WAIT = 30.0  # seconds a task's run may take on a loaded machine (the queue polls each second)


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = WAIT, pool: Any = None
) -> None:
    """Wait until the coroutine `check()` says true (fail after `timeout` seconds, with
    the task's rows when `pool` is given: what the bot had done by then)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; {await rows_of_tasks(pool)}" if pool else "timed out")
        await asyncio.sleep(0.05)


async def rows_of_tasks(pool: Any) -> str:
    """Say what the database holds of the tasks, their runs, jobs, inbox and outbox rows."""
    queries = {
        "tasks": "SELECT id, status, next_at, missed FROM scheduled_tasks ORDER BY id",
        "runs": "SELECT * FROM task_runs ORDER BY slot",
        "jobs": "SELECT id, task_name, status, scheduled_at, args, queueing_lock"
        " FROM procrastinate_jobs ORDER BY id",
        "inbox": "SELECT update_id, chat_id, done_at FROM inbox ORDER BY update_id",
        "outbox": "SELECT update_id, chat_id, status, text FROM outbox ORDER BY created_at",
        "users": "SELECT telegram_user_id, unreachable_since, remind_of_yourself FROM users",
    }
    found = []
    async with pool.connection() as conn:
        for name, query in queries.items():
            try:
                rows = await (await conn.execute(query)).fetchall()
            except Exception as exc:  # a column renamed must not hide the rest
                rows = [repr(exc)]
                await conn.rollback()
            found.append(f"{name}: {rows}")
    return "\n".join(found)


async def due_now(pool: Any, task_id: int) -> datetime:
    """Bring the task's waiting slot to a second ago, as if its time had come; return it."""
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            "UPDATE scheduled_tasks SET next_at = date_trunc('second', now()) - interval '1s'"
            " WHERE id = %s RETURNING next_at",
            (task_id,),
        )
        slot: datetime = (await cur.fetchone())["next_at"]
        await conn.execute(
            "UPDATE procrastinate_jobs SET scheduled_at = %s,"
            " args = jsonb_set(args, '{slot}', to_jsonb(%s::text))"
            " WHERE queueing_lock = %s AND status = 'todo'",
            (slot, slot.isoformat(), f"task:{task_id}"),
        )
    return slot


async def run_replies(pool: Any, chat_id: int) -> list[str]:
    """Return the outbox statuses of the chat's task runs, the first run first."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT status FROM outbox WHERE chat_id = %s AND update_id < 0"
            " ORDER BY update_id DESC",
            (chat_id,),
        )
        return [r["status"] for r in await cur.fetchall()]


async def runs_done(pool: Any, task_id: int, count: int) -> bool:
    """Tell whether `count` slots of the task are claimed and no run is under way."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM task_runs WHERE task_id = %s) = %s"
            " AND NOT EXISTS (SELECT 1 FROM inbox WHERE update_id < 0 AND done_at IS NULL)"
            " AS ok",
            (task_id, count),
        )
        row = await cur.fetchone()
    return bool(row and row["ok"])


def local(slot: datetime) -> str:
    return f"{slot.astimezone(ZONE):%Y-%m-%d %H:%M}"


async def test_a_task_due_while_the_bot_is_blocked_waits_and_arrives_with_its_time(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    llm.script_for(
        CHAT_MODEL,
        {"tool_calls": [schedule("tomorrow at 9", "Remind me to call the dentist")]},
        "Sure.",
        {"tool_calls": [schedule("tomorrow at 10", "Remind me to water the plants")]},
        "Sure too.",
    )
    tg.push_text(ANN, "the dentist", language_code="en")
    await tg.await_messages(ANN, 1, timeout=WAIT)
    tg.push_text(ANN, "the plants", language_code="en")
    await tg.await_messages(ANN, 2, timeout=WAIT)
    tg.block_user(ANN)

    llm.script_for(CHAT_MODEL, "Call the dentist!")
    first = await due_now(pool, 1)
    # Telegram refuses the answer: it is kept for later, not consumed.
    await eventually(lambda: run_replies_are(pool, ANN, ["held"]), pool=pool)
    llm.script_for(CHAT_MODEL, "Water the plants!")
    second = await due_now(pool, 2)
    # The chat is known unreachable now: the answer is kept without trying Telegram.
    await eventually(lambda: run_replies_are(pool, ANN, ["held", "held"]), pool=pool)
    assert len(attempts_to(tg, "sendMessage", ANN)) == 3  # two replies, one refusal
    row = await user_row(pool, ANN)
    assert row["remind_of_yourself"] == "1"  # not muted

    tg.unblock_user(ANN)
    llm.script_for(CHAT_MODEL, "Welcome back.")
    tg.push_text(ANN, "I'm back", language_code="en")
    await tg.await_messages(ANN, 5, timeout=WAIT)
    dentist, plants, welcome = tg.texts_to(ANN)[2:]
    # The kept answers come first, in their order, each saying when it was due.
    assert dentist.startswith(t("task_held", "en", slot=local(first)).strip())
    assert dentist.endswith("Call the dentist!")
    assert plants.startswith(t("task_held", "en", slot=local(second)).strip())
    assert plants.endswith("Water the plants!")
    assert welcome == "Welcome back."
    assert len(attempts_to(tg, "sendMessage", ANN)) == 6  # nothing tried twice
    assert await run_replies(pool, ANN) == ["sent", "sent"]


async def run_replies_are(pool: Any, chat_id: int, statuses: list[str]) -> bool:
    return await run_replies(pool, chat_id) == statuses


async def test_a_block_pauses_reminders_until_the_user_writes_and_never_mutes(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    bot = await start_bot(remind_after_hours=24)
    await chat(tg, BOB, "привет")
    tg.block_user(BOB)
    await go_quiet(pool, BOB)
    stats = await send_reminders(bot.app)
    assert (stats.due, stats.sent, stats.templates) == (1, 0, 0)  # tried: refused
    assert (await send_reminders(bot.app)).due == 0  # not tried again meanwhile
    row = await user_row(pool, BOB)
    assert row["remind_of_yourself"] == "1"  # /mute is the user's switch, not Telegram's

    tg.unblock_user(BOB)
    await chat(tg, BOB, "я вернулся")
    await go_quiet(pool, BOB)
    llm.script_for(CHAT_MODEL, "Как продвигается ваш проект?")
    stats = await send_reminders(bot.app)
    assert (stats.due, stats.sent) == (1, 1)
    assert tg.texts_to(BOB)[-1] == "Как продвигается ваш проект?"
    # /mute turns reminders off, as it would have before the block.
    await chat(tg, BOB, "/mute")
    assert tg.texts_to(BOB)[-1] == t("muted", "ru")


async def test_a_repeating_tasks_slots_are_missed_while_blocked_and_tasks_says_why(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    llm.script_for(
        CHAT_MODEL,
        {"tool_calls": [schedule("tomorrow at 9", "Ask me what I finished", repeat="0 9 * * *")]},
        "Sure.",
    )
    tg.push_text(CID, "every day at 9 ask me what I finished", language_code="en")
    await tg.await_messages(CID, 1, timeout=WAIT)
    tg.block_user(CID)

    llm.script_for(CHAT_MODEL, "What did you finish?")
    await due_now(pool, 1)
    await until(lambda: len(attempts_to(tg, "sendMessage", CID)) >= 2, WAIT)
    await eventually(lambda: runs_done(pool, 1, 1), pool=pool)
    assert len(attempts_to(tg, "sendMessage", CID)) == 2, tg.calls  # refused, once
    calls = len(llm.requests_for(CHAT_MODEL))
    last = await due_now(pool, 1)
    await eventually(lambda: runs_done(pool, 1, 2), pool=pool)
    # Known unreachable: the slot is claimed, counted missed, and nothing runs.
    assert [r["outcome"] for r in await TaskRepository(pool).runs(1)] == ["run", "missed"]
    assert len(llm.requests_for(CHAT_MODEL)) == calls
    assert (await user_row(pool, CID))["remind_of_yourself"] == "1"

    tg.unblock_user(CID)
    tg.push_text(CID, "/tasks", language_code="en")
    [*_, listing] = await tg.await_messages(CID, 2, timeout=WAIT)
    lines = listing["text"].splitlines()
    assert lines[1].startswith("#1 ") and lines[1].endswith("Ask me what I finished")
    assert lines[2] == t("task_missed", "en", count=2, last=local(last))
    assert t("tasks_paused", "en") not in listing["text"]  # not muted: unreachable

    # The next answer arrives: the missed slots are behind.
    llm.script_for(CHAT_MODEL, "What did you finish today?")
    await due_now(pool, 1)
    [*_, asked] = await tg.await_messages(CID, 3, timeout=WAIT)
    assert asked["text"] == "What did you finish today?"
    await eventually(lambda: runs_done(pool, 1, 3), pool=pool)
    tg.push_text(CID, "/tasks", language_code="en")
    [*_, listing] = await tg.await_messages(CID, 4, timeout=WAIT)
    assert len(listing["text"].splitlines()) == 2  # the title and the task alone
