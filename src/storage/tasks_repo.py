"""Scheduled tasks (issue 35): stored with the job that waits for their next slot, and
each slot claimed once (see sql/0030_scheduled_tasks.sql).

Every write that schedules a slot defers its procrastinate job in the same transaction
(procrastinate's own versioned SQL function, as the inbox does), so a crash leaves both
or neither; the job's queueing lock (`task:<id>`) keeps one slot waiting per task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from src.storage.base import Conn, Repository, clean_text
from src.storage.delivery_repo import DEFER_JOBS, QUEUE, UPDATE_TASK

DUE_TASK = "tgagent.task_due"
INSERT_TASK = """
INSERT INTO scheduled_tasks (owner_id, topic_id, language_code, instruction, repeat, timezone,
    next_at, requested_by)
SELECT %s, %s, %s, %s, %s, %s, %s, %s
WHERE (SELECT count(*) FROM scheduled_tasks WHERE owner_id = %s AND status = 'active') < %s
RETURNING *
"""
# Tasks scheduled at once (the model's parallel tool calls) count one after the other.
LOCK_OWNER = "SELECT 1 FROM users WHERE telegram_user_id = %s FOR UPDATE"
# One job per slot: its scheduled time is the slot, its queueing lock the task's.
DEFER_DUE = """
SELECT procrastinate_defer_jobs_v1(ARRAY[
    ROW(%s, %s, 0, NULL, %s, jsonb_build_object('task_id', %s::bigint, 'slot', %s::text), %s)
    ::procrastinate_job_to_defer_v1
])
"""
CANCEL = """
UPDATE scheduled_tasks SET status = 'cancelled', next_at = NULL
WHERE id = %s AND owner_id = %s AND status = 'active'
"""
ACTIVE = """
SELECT * FROM scheduled_tasks WHERE owner_id = %s AND status = 'active' ORDER BY next_at, id
"""
TASK_FOR_UPDATE = "SELECT * FROM scheduled_tasks WHERE id = %s FOR UPDATE"
TASK = "SELECT * FROM scheduled_tasks WHERE id = %s"
CLAIM = """
INSERT INTO task_runs (task_id, slot, owner_id, late, outcome) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (task_id, slot) DO NOTHING
RETURNING update_id
"""
STORE_RUN = """
INSERT INTO inbox (update_id, chat_id, payload) VALUES (%s, %s, %s)
ON CONFLICT (update_id) DO NOTHING
"""
ADVANCE = "UPDATE scheduled_tasks SET next_at = %s WHERE id = %s"
# A repeating task's slot its chat could not receive (sql/0035_unreachable.sql): counted
# until one of its answers arrives again.
MISSED = """
UPDATE scheduled_tasks SET missed = missed + 1, missed_last = greatest(missed_last, %s)
WHERE id = %s
"""
ARRIVED = "UPDATE scheduled_tasks SET missed = 0, missed_last = NULL WHERE id = %s AND missed > 0"
FINISH = "UPDATE scheduled_tasks SET status = 'done', next_at = NULL WHERE id = %s"
RUNS = "SELECT * FROM task_runs WHERE task_id = %s ORDER BY slot"
# A claimed slot is kept while its job could run again (procrastinate retries a failed
# claim for about an hour, a dead worker's job soon after), then only to show nothing:
# the claim also checks the task's waiting slot, so an old one is never claimed again.
PRUNE_RUNS = "DELETE FROM task_runs WHERE at < now() - make_interval(days => %s)"
PRUNE_TASKS = """
DELETE FROM scheduled_tasks
WHERE status <> 'active' AND created_at < now() - make_interval(days => %s)
  AND NOT EXISTS (SELECT 1 FROM task_runs r WHERE r.task_id = scheduled_tasks.id)
"""


def task_lock(task_id: int) -> str:
    """Return the queueing lock of a task's waiting slot."""
    return f"task:{task_id}"


@dataclass(frozen=True)
class Claim:
    """What claiming a due slot did."""

    update_id: int | None
    """The run's inbox row, when the slot was claimed now and runs (else None)."""
    next_at: datetime | None
    """The task's next slot, deferred in the same transaction (None: no more)."""


class TaskRepository(Repository):
    """Scheduled tasks and their runs, each query naming the owner or the task."""

    async def create(
        self,
        task: dict[str, Any],
        first: datetime,
        limit: int,
    ) -> dict[str, Any] | None:
        """Store a task whose first slot is `first` and defer that slot's job, unless the
        owner has `limit` active tasks already (then None)."""
        params = (
            task["owner_id"],
            task.get("topic_id") or 0,
            task.get("language_code"),
            clean_text(task["instruction"]),
            task.get("repeat"),
            task["timezone"],
            first,
            task.get("requested_by"),
            task["owner_id"],
            limit,
        )
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(LOCK_OWNER, (task["owner_id"],))
            row = await (await conn.execute(INSERT_TASK, params)).fetchone()
            if row is not None:
                await self._defer(conn, row["id"], first)
        return row

    @staticmethod
    async def _defer(conn: Conn, task_id: int, slot: datetime) -> None:
        params = (QUEUE, DUE_TASK, task_lock(task_id), task_id, slot.isoformat(), slot)
        await conn.execute(DEFER_DUE, params)

    async def cancel(self, owner_id: int, task_id: int) -> bool:
        """Cancel the owner's active task `task_id`; False when there is none such (its
        waiting job finds it cancelled and does nothing)."""
        async with self._conn() as conn:
            return (await conn.execute(CANCEL, (task_id, owner_id))).rowcount > 0

    async def active(self, owner_id: int) -> list[dict[str, Any]]:
        """Return the owner's active tasks, the soonest first."""
        async with self._conn() as conn:
            return await (await conn.execute(ACTIVE, (owner_id,))).fetchall()

    async def get(self, task_id: int) -> dict[str, Any] | None:
        """Return the task `task_id`, or None."""
        async with self._conn() as conn:
            return await (await conn.execute(TASK, (task_id,))).fetchone()

    async def prune(self, days: int = 2) -> tuple[int, int]:
        """Delete claimed slots older than `days` days, then the tasks that are done or
        cancelled and have no slot left; return how many of each went. Without it a task
        every hour would keep 8,760 rows a year."""
        async with self._conn() as conn:
            runs = (await conn.execute(PRUNE_RUNS, (days,))).rowcount
            tasks = (await conn.execute(PRUNE_TASKS, (days,))).rowcount
        return runs, tasks

    async def runs(self, task_id: int) -> list[dict[str, Any]]:
        """Return the task's claimed slots, oldest first."""
        async with self._conn() as conn:
            return await (await conn.execute(RUNS, (task_id,))).fetchall()

    async def missed(self, task_id: int, slot: datetime) -> None:
        """Count the task's `slot` as missed: its answer could not be delivered."""
        async with self._conn() as conn:
            await conn.execute(MISSED, (slot, task_id))

    async def arrived(self, task_id: int) -> None:
        """One of the task's answers was delivered: no slot counts as missed any more."""
        async with self._conn() as conn:
            await conn.execute(ARRIVED, (task_id,))

    async def claim(
        self,
        task_id: int,
        slot: datetime,
        decide: Any,
    ) -> Claim | None:
        """Claim the due `slot` of the task, once, in one transaction: decide its outcome
        (`decide(task) -> (outcome, late, next_at)`), store a run in the inbox with its
        chat's job when the outcome is "run" (count it on the task when "missed"), and
        defer the next slot. None: the slot is
        not the task's waiting one any more (cancelled, erased, claimed already)."""
        async with self.pool.connection() as conn, conn.transaction():
            task = await (await conn.execute(TASK_FOR_UPDATE, (task_id,))).fetchone()
            if task is None or task["status"] != "active" or task["next_at"] != slot:
                return None
            outcome, late, next_at = await decide(task)
            params = (task_id, slot, task["owner_id"], late, outcome)
            claimed = await (await conn.execute(CLAIM, params)).fetchone()
            if claimed is None:
                return None
            update_id = None
            if outcome == "missed":
                await conn.execute(MISSED, (slot, task_id))
            if outcome == "run":
                update_id = int(claimed["update_id"])
                chat = int(task["owner_id"])
                payload = {"task_run": {"task_id": task_id, "slot": slot.isoformat(), "late": late}}
                await conn.execute(STORE_RUN, (update_id, chat, json.dumps(payload)))
                jobs = (QUEUE, UPDATE_TASK, [update_id], [f"chat:{chat}"])
                await conn.execute(DEFER_JOBS, jobs)
            if next_at is None:
                await conn.execute(FINISH, (task_id,))
            else:
                await conn.execute(ADVANCE, (next_at, task_id))
                await self._defer(conn, task_id, next_at)
        return Claim(update_id, next_at)
