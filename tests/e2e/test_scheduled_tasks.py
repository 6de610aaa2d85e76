"""Scheduled tasks (issue 35) in one bot process: the model schedules, the task runs as
a turn of the owner's conversation at its time, /tasks lists and cancels, /mute pauses,
limits hold. The real Application against the fake Bot API, the fake model and real
PostgreSQL; restarts and kills: tests/e2e/test_scheduled_process.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from src.bot.task_commands import TASK_DATA
from src.services.texts import t
from src.storage.tasks_repo import TaskRepository
from tests.db_scan import traces
from tests.e2e.conftest import CHAT_MODEL, stored, until
from tests.fakes.bot_api_server import FakeBotAPI

ANN = 9951
BOB = 9952


def schedule(when: str, instruction: str, repeat: str | None = None) -> dict[str, Any]:
    """A schedule_task call of the model."""
    args = {"when": when, "instruction": instruction}
    if repeat is not None:
        args["repeat"] = repeat
    return {"name": "schedule_task", "args": args}


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 15.0) -> None:
    """Wait until the coroutine `check()` says true (fail after `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def settled(pool: Any, task_id: int) -> bool:
    """Tell whether nothing of the task waits: no slot's job, no run not yet done."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM procrastinate_jobs WHERE queueing_lock = %s"
            "        AND status IN ('todo', 'doing'))"
            "     + (SELECT count(*) FROM inbox WHERE update_id < 0 AND done_at IS NULL) AS n",
            (f"task:{task_id}",),
        )
        row = await cur.fetchone()
    return row is not None and row["n"] == 0


def tool_results(llm: Any) -> list[str]:
    """Return the text of every tool result the chat model was sent, in order."""
    seen: list[str] = []
    for request in llm.requests_for(CHAT_MODEL):
        for message in request["messages"]:
            if message["role"] == "tool" and message["content"] not in seen:
                seen.append(message["content"])
    return seen


async def test_a_task_runs_once_at_its_time_as_the_users_note(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    bot = await start_bot()
    llm.script_for(
        CHAT_MODEL,
        {"tool_calls": [schedule("in 3 seconds", "Remind me to drink water")]},
        "I will remind you.",
        "Time to drink water!",
    )
    tg.push_text(ANN, "remind me in 3 seconds to drink water", language_code="en")
    [first] = await tg.await_messages(ANN, 1)
    assert first["text"] == "I will remind you."
    assert tool_results(llm)[0].startswith("Scheduled task #")
    scheduled = time.monotonic()
    [*_, reminder] = await tg.await_messages(ANN, 2, timeout=20)
    assert reminder["text"] == "Time to drink water!"
    assert time.monotonic() - scheduled > 1.0  # at its time, not at once
    rows = await stored(bot.runtime.pool, ANN)
    notes = [c for r, c in rows if r == "user" and "Scheduled task" in c]
    # The user's own words, time-stamped, framed as their task: a user message.
    [note] = notes
    assert note.startswith("[Current time: ")
    assert note.endswith("] [Scheduled task #1, set by the user: Remind me to drink water]")
    request = llm.requests_for(CHAT_MODEL)[-1]
    # The model got it as the user's message, in no system message.
    assert any(
        m["role"] == "user" and str(m["content"]).endswith(note) for m in request["messages"]
    )
    assert all(
        "Remind me to drink water" not in str(m["content"])
        for m in request["messages"]
        if m["role"] == "system"
    )
    repo = TaskRepository(bot.runtime.pool)
    task = await repo.get(1)
    assert task is not None and task["status"] == "done"
    [run] = await repo.runs(1)
    assert run["outcome"] == "run" and not run["late"]
    # Once: nothing more comes.
    await tg.await_messages(ANN, 2)
    assert len(tg.messages_to(ANN)) == 2


@pytest.mark.slow
async def test_a_repeating_task_runs_each_slot_once_until_cancelled_by_the_model(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    bot = await start_bot(min_task_interval=2)
    llm.script_for(
        CHAT_MODEL,
        {"tool_calls": [schedule("in 1 second", "Say tick", repeat="* * * * * */2")]},
        "Ticking.",
    )
    llm.default_for(CHAT_MODEL, "tick")
    tg.push_text(ANN, "say tick every 2 seconds", language_code="en")
    await tg.await_messages(ANN, 4, timeout=20)
    repo = TaskRepository(bot.runtime.pool)
    llm.script_for(CHAT_MODEL, {"tool_calls": [{"name": "cancel_task", "args": {"id": 1}}]})
    llm.script_for(CHAT_MODEL, "Stopped.")
    tg.push_text(ANN, "stop the ticking", language_code="en")
    await until(lambda: "Stopped." in tg.texts_to(ANN), timeout=20)
    task = await repo.get(1)
    assert task is not None and task["status"] == "cancelled"
    runs = await repo.runs(1)
    slots = [r["slot"] for r in runs]
    assert len(slots) == len(set(slots)) >= 2
    assert all(r["outcome"] == "run" for r in runs)
    # The slot waiting when it was cancelled comes due and finds it cancelled.
    await eventually(lambda: settled(bot.runtime.pool, 1))
    assert len(await repo.runs(1)) == len(runs)
    assert tg.texts_to(ANN)[-1] == "Stopped."


async def test_tasks_lists_them_and_its_button_cancels_one(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot()
    # One after the other: the ids follow the order.
    llm.script_for(
        CHAT_MODEL,
        {"tool_calls": [schedule("tomorrow at 9", "Call the dentist")]},
        "Done.",
        {"tool_calls": [schedule("2030-01-01T10:00", "Happy new decade", repeat="0 10 1 1 *")]},
        "Done too.",
    )
    tg.push_text(ANN, "plan the dentist", language_code="en")
    await tg.await_messages(ANN, 1)
    tg.push_text(ANN, "plan the decade", language_code="en")
    await tg.await_messages(ANN, 2)
    tg.push_text(ANN, "/tasks", language_code="en")
    [*_, listing] = await tg.await_messages(ANN, 3)
    lines = listing["text"].splitlines()
    assert lines[0] == t("tasks_title", "en", zone="Europe/Moscow")
    assert lines[1].startswith("#1 ") and lines[1].endswith(" 09:00: Call the dentist")
    assert lines[2] == "#2 2030-01-01 10:00 (repeats: 0 10 1 1 *): Happy new decade"
    shown = tg.bot_message(ANN, listing["message_id"])
    assert shown is not None
    buttons = [row[0] for row in shown["reply_markup"]["inline_keyboard"]]
    assert [b["callback_data"] for b in buttons] == [f"{TASK_DATA}1", f"{TASK_DATA}2"]
    tg.push_callback(ANN, ANN, listing["message_id"], f"{TASK_DATA}1", language_code="en")
    await until(lambda: tg.callback_answers)
    assert tg.callback_answers[-1]["text"] == t("task_cancelled", "en", id=1)

    def shown_again() -> str:
        return str((tg.bot_message(ANN, listing["message_id"]) or {}).get("text", ""))

    await until(lambda: "Call the dentist" not in shown_again())
    assert "Happy new decade" in shown_again()
    # Another user sees none of them, and cannot cancel them.
    tg.push_text(BOB, "/tasks", language_code="en")
    [bobs] = await tg.await_messages(BOB, 1)
    assert bobs["text"] == t("tasks_none", "en")


async def test_limits_and_bad_times_are_told_to_the_model(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot(max_tasks=1)
    llm.script_for(
        CHAT_MODEL,
        {
            "tool_calls": [
                schedule("every now and then", "x"),
                schedule("in 1 hour", "y", repeat="*/5 * * * *"),
                schedule("in 1 hour", "first"),
                schedule("in 2 hours", "second"),
            ]
        },
        "ok",
    )
    tg.push_text(ANN, "plan", language_code="en")
    await tg.await_messages(ANN, 1)
    results = tool_results(llm)
    assert results[0].startswith("Error: cannot read the time 'every now and then'")
    assert results[1] == "Error: tasks may repeat at most once every 1 hour(s)."
    # The two calls run at once: one is stored, the other told the limit.
    first, second = sorted(results[2:], reverse=True)
    assert first.startswith("Scheduled task #")
    assert second.startswith("Error: the user has 1 active tasks, the most allowed")


async def test_mute_pauses_tasks(start_bot: Any, tg: FakeBotAPI, llm: Any) -> None:
    bot = await start_bot()
    tg.push_text(ANN, "/mute", language_code="en")
    await tg.await_messages(ANN, 1)
    llm.script_for(CHAT_MODEL, {"tool_calls": [schedule("in 1 second", "Ping me")]}, "Sure.")
    tg.push_text(ANN, "ping me in a second", language_code="en")
    await tg.await_messages(ANN, 2)
    repo = TaskRepository(bot.runtime.pool)
    await eventually(lambda: settled(bot.runtime.pool, 1))
    [run] = await repo.runs(1)
    assert run["outcome"] == "muted"
    assert len(tg.messages_to(ANN)) == 2


async def test_a_task_of_an_owner_no_longer_admitted_is_not_run(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    bot = await start_bot()
    llm.script_for(CHAT_MODEL, {"tool_calls": [schedule("in 2 seconds", "Ping me")]}, "Sure.")
    tg.push_text(ANN, "ping me soon", language_code="en")
    await tg.await_messages(ANN, 1)
    await bot.close()
    # The operator closes the bot to Bob only before the task is due.
    bot = await start_bot(allowed_user_ids=str(BOB))
    await eventually(lambda: settled(bot.runtime.pool, 1))
    [run] = await TaskRepository(bot.runtime.pool).runs(1)
    assert run["outcome"] == "refused"
    assert len(tg.messages_to(ANN)) == 1


async def test_a_groups_task_runs_while_the_member_who_asked_may_use_the_bot(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    """The allowlist names Ann, not her group: her messages there are answered, so the
    task she asked for there runs too; once the operator drops her, it is refused."""
    group = -100_996_000
    tg.set_chat_admins(group, ANN)  # a group's tasks are its administrators' to set
    bot = await start_bot(allowed_user_ids=str(ANN))
    llm.script_for(
        CHAT_MODEL,
        {"tool_calls": [schedule("in 2 seconds", "Remind us")]},
        "Sure.",
        "Reminder!",
        {"tool_calls": [schedule("in 3 seconds", "Remind us again")]},
        "Sure.",
    )
    tg.push_text(ANN, "@tgagent_test_bot remind us", chat_id=group, chat_type="supergroup")
    await tg.await_messages(group, 2, timeout=20)
    assert tg.messages_to(group)[-1]["text"] == "Reminder!"
    await eventually(lambda: settled(bot.runtime.pool, 1))
    [run] = await TaskRepository(bot.runtime.pool).runs(1)
    assert run["outcome"] == "run"
    tg.push_text(ANN, "@tgagent_test_bot and again", chat_id=group, chat_type="supergroup")
    await tg.await_messages(group, 3, timeout=20)
    await bot.close()
    bot = await start_bot(allowed_user_ids=str(BOB))  # Ann dropped before it is due
    await eventually(lambda: settled(bot.runtime.pool, 2))
    [run] = await TaskRepository(bot.runtime.pool).runs(2)
    assert run["outcome"] == "refused"
    assert len(tg.messages_to(group)) == 3


async def test_export_holds_the_zone_and_tasks_and_erase_deletes_them(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    tg.push_text(ANN, "/tz Europe/Berlin", language_code="en")
    await tg.await_messages(ANN, 1)
    marker = "qwzmarker31415"
    llm.script_for(
        CHAT_MODEL, {"tool_calls": [schedule("in 2 hours", f"Water the {marker}")]}, "Sure."
    )
    tg.push_text(ANN, "remind me later", language_code="en")
    await tg.await_messages(ANN, 2)
    tg.push_text(ANN, "/export", language_code="en")
    await until(lambda: len(tg.calls_of("sendDocument")) >= 2, 20)
    files = [c["params"]["document"] for c in tg.calls_of("sendDocument")]
    data = json.loads(files[0]["data"])
    assert data["profile"]["timezone"] == "Europe/Berlin"
    [task] = data["tasks"]
    assert task["instruction"] == f"Water the {marker}" and task["status"] == "active"
    assert marker in files[1]["data"].decode()
    before = len(tg.messages_to(ANN))
    tg.push_text(ANN, "/erase yes", language_code="en")
    [*_, erased] = await tg.await_messages(ANN, before + 1, timeout=20)
    assert erased["text"].startswith("Done")
    assert await traces(pool, marker) == []
    tg.push_text(ANN, "/tasks", language_code="en")
    [*_, listing] = await tg.await_messages(ANN, before + 2)
    assert listing["text"] == t("tasks_none", "en")


async def test_a_slot_missed_while_all_was_down_runs_once_on_start_marked_late(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    """Three hourly slots passed while no process ran: one run at the start, told late,
    and the next slot after now."""
    bot = await start_bot()
    llm.script_for(
        CHAT_MODEL,
        {"tool_calls": [schedule("in 1 hour", "Hourly check", repeat="0 * * * *")]},
        "Sure.",
    )
    tg.push_text(ANN, "check hourly", language_code="en")
    await tg.await_messages(ANN, 1)
    await bot.close()
    # Everything was down for three hours: the waiting slot is long past.
    async with pool.connection() as conn:
        cur = await conn.execute(
            "UPDATE scheduled_tasks SET next_at = date_trunc('hour', now()) - interval '2 hours'"
            " RETURNING next_at"
        )
        missed = (await cur.fetchone())["next_at"]
        await conn.execute(
            "UPDATE procrastinate_jobs SET scheduled_at = %s,"
            " args = jsonb_set(args, '{slot}', to_jsonb(%s::text))"
            " WHERE queueing_lock = 'task:1' AND status = 'todo'",
            (missed, missed.isoformat()),
        )
    llm.script_for(CHAT_MODEL, "Checked, a bit late.")
    bot = await start_bot()
    [*_, late] = await tg.await_messages(ANN, 2, timeout=20)
    assert late["text"] == "Checked, a bit late."
    await eventually(lambda: waiting(pool, 1))
    [run] = await TaskRepository(pool).runs(1)
    assert run["late"] and run["slot"] == missed
    [note] = [c for r, c in await stored(pool, ANN) if r == "user" and "Scheduled task" in c]
    assert ", running late: it was due at " in note
    task = await TaskRepository(pool).get(1)
    assert task is not None and task["next_at"] > datetime.now(UTC)
    assert len(tg.messages_to(ANN)) == 2


async def waiting(pool: Any, task_id: int) -> bool:
    """Tell whether the task's run is done and only its next slot's job waits."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM procrastinate_jobs WHERE queueing_lock = %s"
            "        AND status = 'todo' AND scheduled_at > now())"
            "     = 1 AND NOT EXISTS (SELECT 1 FROM inbox WHERE update_id < 0"
            "        AND done_at IS NULL) AS ok",
            (f"task:{task_id}",),
        )
        row = await cur.fetchone()
    return bool(row and row["ok"])


async def test_a_groups_task_is_charged_to_the_member_who_asked(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    """A task set in a group runs on the group's memory and spends the group's budget and
    the budget of the member who asked for it, as that member's turns there do; after
    the member's /erase it keeps running, charged to the group only."""
    group = -100_995_000
    tg.set_chat_admins(group, BOB)  # a group's tasks are its administrators' to set
    bot = await start_bot()
    llm.script_for(
        CHAT_MODEL,
        {"tool_calls": [schedule("in 2 seconds", "Remind us about the standup")]},
        "Will do.",
        "Standup time!",
    )
    tg.push_text(
        BOB, "@tgagent_test_bot remind us in 2 seconds", chat_id=group, chat_type="supergroup"
    )
    await tg.await_messages(group, 2, timeout=20)
    assert tg.messages_to(group)[-1]["text"] == "Standup time!"
    repo = TaskRepository(bot.runtime.pool)
    task = await repo.get(1)
    assert task is not None and (task["owner_id"], task["requested_by"]) == (group, BOB)

    async def senders() -> list[tuple[int, int | None]]:
        async with bot.runtime.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT owner_id, sender_id FROM llm_calls WHERE purpose = 'reply' ORDER BY at"
            )
            return [(r["owner_id"], r["sender_id"]) for r in await cur.fetchall()]

    # The asking turn's two calls (the tool round, the answer) and the task's run: all the
    # group's, all charged to Bob too.
    await eventually(lambda: _count(senders, 3))
    assert await senders() == [(group, BOB)] * 3
    tg.push_text(BOB, "/erase yes", language_code="en")
    await tg.await_messages(BOB, 1, timeout=20)
    await eventually(lambda: _requested_by(repo, 1, None))


async def _count(rows: Callable[[], Awaitable[list[Any]]], n: int) -> bool:
    return len(await rows()) >= n


async def _requested_by(repo: TaskRepository, task_id: int, who: int | None) -> bool:
    task = await repo.get(task_id)
    return task is not None and task["requested_by"] == who
