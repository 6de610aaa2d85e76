"""Scheduled tasks across processes (issue 35): `tgagent bot` SIGKILLed before a task is
due, a repeating task across a kill and a restart, and two workers beside the bot. Each
slot runs once: its note stored once, its answer sent once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from src.bot.task_commands import TASK_DATA
from src.services.texts import t
from src.storage.tasks_repo import TaskRepository
from tests.e2e.conftest import CHAT_MODEL, until
from tests.e2e.conftest import stored as rows_of
from tests.e2e.test_reliability_process import (
    bot_env,
    bot_process,
    inbox,
    output,
    terminate,
    worker_process,
)
from tests.e2e.test_scheduled_tasks import eventually, schedule, settled
from tests.fakes.bot_api_server import FakeBotAPI

logger = logging.getLogger(__name__)


pytestmark = [pytest.mark.server, pytest.mark.slow]


async def notes(pool: Any, owner: int) -> list[str]:
    """Return the owner's stored task notes (user messages of task runs), in order."""
    return [c for r, c in await rows_of(pool, owner) if r == "user" and "Scheduled task #" in c]


async def runs(pool: Any, task_id: int) -> list[dict[str, Any]]:
    """Return the task's claimed slots, oldest first."""
    return await TaskRepository(pool).runs(task_id)


async def test_a_task_due_in_five_seconds_arrives_once_across_a_sigkill(
    pool: Any, fresh_schema: str, tg: FakeBotAPI, llm: Any, tmp_path: Path, record_property: Any
) -> None:
    """The model schedules "in 5 seconds"; the bot is SIGKILLed at once and started again
    before it is due: the reminder arrives once, on time."""
    user = 8701
    env = bot_env(fresh_schema, tg, llm)
    llm.script_for(
        CHAT_MODEL,
        {"tool_calls": [schedule("in 5 seconds", "Remind me to stretch")]},
        "I will remind you.",
        "Stretch now!",
    )
    async with bot_process(env, tg, tmp_path) as proc:
        tg.push_text(user, "remind me in 5 seconds to stretch", language_code="en")
        await tg.await_messages(user, 1, timeout=30)
        scheduled_at = time.monotonic()
        # Its update done: a kill while Telegram takes a reply may send that reply again
        # (the outbox's window), which is not what this test is about.
        await eventually(lambda: inbox_done(pool, 1), 10)
        proc.kill()
        await asyncio.to_thread(proc.wait, 10)
    task = await TaskRepository(pool).get(1)
    assert task is not None and task["status"] == "active" and await runs(pool, 1) == []
    # Started again before the task is due (how soon it polls depends on the machine).
    restarted_in = time.monotonic() - scheduled_at
    assert restarted_in < 5, "the restart came after the task was due"
    async with bot_process(env, tg, tmp_path) as proc:
        [*_, reminder] = await tg.await_messages(user, 2, timeout=30)
        arrived_after = time.monotonic() - scheduled_at
        await eventually(lambda: settled(pool, 1), 30)
        exit_s = await terminate(proc)
    assert proc.returncode == 0, output(tmp_path)[1]
    assert reminder["text"] == "Stretch now!"
    assert tg.texts_to(user) == ["I will remind you.", "Stretch now!"]
    [run] = await runs(pool, 1)
    assert run["outcome"] == "run" and not run["late"]
    assert len(await notes(pool, user)) == 1
    assert arrived_after >= 4.0  # at its time, not at the restart
    figures = {
        "restarted_after_s": round(restarted_in, 2),
        "arrived_after_s": round(arrived_after, 2),
        "exit_s": round(exit_s, 2),
    }
    for key, value in figures.items():
        record_property(key, value)
    logger.warning("a task across a SIGKILL: %s", figures)


async def test_a_repeating_task_runs_each_slot_once_across_a_sigkill_until_cancelled(
    pool: Any, fresh_schema: str, tg: FakeBotAPI, llm: Any, tmp_path: Path
) -> None:
    """Every 2 seconds (MIN_TASK_INTERVAL lowered for the test): slots run before and
    after a SIGKILL, none twice; the /tasks button stops it."""
    user = 8702
    env = bot_env(fresh_schema, tg, llm, MIN_TASK_INTERVAL="1")
    llm.script_for(
        CHAT_MODEL,
        {"tool_calls": [schedule("in 1 second", "Say tick", repeat="* * * * * */2")]},
        "Ticking.",
    )
    llm.default_for(CHAT_MODEL, "tick")
    async with bot_process(env, tg, tmp_path) as proc:
        tg.push_text(user, "say tick every two seconds", language_code="en")
        await tg.await_messages(user, 3, timeout=30)  # two ticks
        # Killed while a slot's turn waits for the model: that run is done by the next
        # process, on its note stored once.
        llm.delay = 30.0
        await until(lambda: llm.in_flight >= 1, 30)
        proc.kill()
        await asyncio.to_thread(proc.wait, 10)
    killed_at = time.time()
    llm.delay = 0.0
    before = len(await runs(pool, 1))
    async with bot_process(env, tg, tmp_path) as proc:
        await eventually(lambda: more_runs(pool, before + 2), 30)
        tg.push_text(user, "/tasks", language_code="en")
        title = t("tasks_title", "en", zone="Europe/Moscow")
        await until(lambda: any(m["text"].startswith(title) for m in tg.messages_to(user)), 30)
        listing = next(m for m in tg.messages_to(user) if m["text"].startswith(title))
        tg.push_callback(user, user, listing["message_id"], f"{TASK_DATA}1", language_code="en")
        await until(lambda: bool(tg.callback_answers), 30)
        await eventually(lambda: settled(pool, 1), 30)
        exit_s = await terminate(proc)
    assert proc.returncode == 0, output(tmp_path)[1]
    claimed = await runs(pool, 1)
    ran = [r for r in claimed if r["outcome"] == "run"]
    assert len({r["slot"] for r in claimed}) == len(claimed)
    assert any(r["slot"].timestamp() > killed_at for r in ran)  # on schedule after the restart
    # Each slot's note stored once and its answer sent once: none twice, none lost (but
    # a slot claimed before the cancel and not started by then, which does not run).
    stored_notes = len(await notes(pool, user))
    assert len(ran) - 1 <= stored_notes <= len(ran)
    assert tg.texts_to(user).count("tick") == stored_notes
    task = await TaskRepository(pool).get(1)
    assert task is not None and task["status"] == "cancelled"
    logger.warning("a repeating task across a SIGKILL: %d slots, exit %.2f s", len(ran), exit_s)


async def inbox_done(pool: Any, n: int) -> bool:
    """Tell whether at least `n` updates of the inbox are done."""
    return (await inbox(pool))[1] >= n


async def more_runs(pool: Any, n: int) -> bool:
    """Tell whether task 1 has at least `n` claimed slots."""
    return len(await runs(pool, 1)) >= n


async def test_two_workers_beside_the_bot_never_both_run_a_slot(
    pool: Any, fresh_schema: str, tg: FakeBotAPI, llm: Any, tmp_path: Path
) -> None:
    """`tgagent bot` and two `tgagent worker`s all take jobs: a task every second runs
    each slot once, its answer sent once."""
    user = 8703
    env = bot_env(fresh_schema, tg, llm, MIN_TASK_INTERVAL="1")
    llm.script_for(
        CHAT_MODEL,
        {"tool_calls": [schedule("in 1 second", "Say tock", repeat="* * * * * *")]},
        "Tocking.",
    )
    llm.default_for(CHAT_MODEL, "tock")
    async with (
        bot_process(env, tg, tmp_path) as bot,
        worker_process(env, tmp_path, "worker-a-") as a,
        worker_process(env, tmp_path, "worker-b-") as b,
    ):
        tg.push_text(user, "say tock every second", language_code="en")
        await eventually(lambda: more_runs(pool, 8), 40)
        await TaskRepository(pool).cancel(user, 1)
        await eventually(lambda: settled(pool, 1), 30)
        for proc in (a, b, bot):
            await terminate(proc)
    claimed = await runs(pool, 1)
    ran = [r for r in claimed if r["outcome"] == "run"]
    assert len({r["slot"] for r in claimed}) == len(claimed) >= 8
    stored_notes = len(await notes(pool, user))
    assert len(ran) - 1 <= stored_notes <= len(ran)  # the last may come after the cancel
    assert tg.texts_to(user).count("tock") == stored_notes
