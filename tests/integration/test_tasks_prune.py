"""Scheduled tasks' rows do not grow forever: claimed slots and ended tasks are pruned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from src.storage.tasks_repo import TaskRepository

OWNER = 7301


async def count(pool: Any, sql: str) -> int:
    async with pool.connection() as conn:
        return int((await (await conn.execute(sql)).fetchone())["n"])


async def test_old_slots_and_ended_tasks_are_pruned_and_the_active_task_stays(
    pool: Any,
) -> None:
    repo = TaskRepository(pool)
    first = datetime.now(UTC) + timedelta(hours=1)
    task = {"owner_id": OWNER, "instruction": "", "timezone": "UTC", "repeat": "0 * * * *"}
    active = await repo.create(task | {"instruction": "stretch"}, first, limit=20)
    ended = await repo.create(task | {"instruction": "water the plants"}, first, limit=20)
    assert active is not None and ended is not None
    assert await repo.cancel(OWNER, ended["id"])
    now = datetime.now(UTC)
    async with pool.connection() as conn:
        # An hourly task's slots over three days, claimed as they came due.
        for task_id in (active["id"], ended["id"]):
            for hours in range(72):
                slot = now - timedelta(hours=hours)
                await conn.execute(
                    "INSERT INTO task_runs (task_id, slot, owner_id, outcome, at)"
                    " VALUES (%s, %s, %s, 'run', %s)",
                    (task_id, slot, OWNER, slot),
                )
        await conn.execute("UPDATE scheduled_tasks SET created_at = now() - interval '3 days'")
    assert await repo.prune() == (2 * 24, 0)  # older than two days; the ended one has runs
    assert await count(pool, "SELECT count(*) AS n FROM task_runs") == 2 * 48
    async with pool.connection() as conn:
        await conn.execute("UPDATE task_runs SET at = now() - interval '3 days'")
    assert await repo.prune() == (2 * 48, 1)
    left = await count(pool, "SELECT count(*) AS n FROM scheduled_tasks")
    assert left == 1 and [t["id"] for t in await repo.active(OWNER)] == [active["id"]]
