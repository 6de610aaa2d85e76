"""Read turns (see `src.devtools.turns`) from LangGraph's checkpoint tables, never writing."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple
from psycopg_pool import AsyncConnectionPool

from src.devtools.common import (
    EXIT_ENVIRONMENT,
    EXIT_INCOMPATIBLE,
    DevtoolsError,
    missing_tables,
)
from src.devtools.turns import HEAD_SOURCES, Step, Turn, next_nodes, node_of, split_turns
from src.storage.checkpointer import PooledPostgresSaver

# A thread's checkpoints from one id on ("" for all of them): a turn's checkpoints all
# come after its first one, so the turns that start there on are complete.
SELECT_HEADERS = """
SELECT checkpoint_id, parent_checkpoint_id, metadata, checkpoint ->> 'ts' AS ts,
       checkpoint -> 'updated_channels' AS updated_channels
FROM checkpoints
WHERE thread_id = %s AND checkpoint_ns = '' AND checkpoint_id COLLATE "C" >= %s
ORDER BY checkpoint_id COLLATE "C"
"""
SELECT_TASKS = """
SELECT checkpoint_id, task_id, min(task_path) AS task_path, bool_or(channel = '__error__') AS failed
FROM checkpoint_writes
WHERE thread_id = %s AND checkpoint_ns = '' AND checkpoint_id COLLATE "C" >= %s
GROUP BY checkpoint_id, task_id ORDER BY checkpoint_id COLLATE "C", min(task_path)
"""
# Checkpoint ids are time-ordered (uuid6): the newest turns sort last by id, bytewise.
# A page of first checkpoints, newest first, in some threads (NULL: all) and before an
# id (NULL: from the newest).
SELECT_HEADS = """
SELECT thread_id, checkpoint_id FROM checkpoints
WHERE checkpoint_ns = '' AND metadata ->> 'source' = ANY(%(sources)s)
  AND (%(threads)s::text[] IS NULL OR thread_id = ANY(%(threads)s::text[]))
  AND (%(before)s::text IS NULL OR checkpoint_id COLLATE "C" < %(before)s::text)
ORDER BY checkpoint_id COLLATE "C" DESC LIMIT %(limit)s
"""
SELECT_THREADS_LIKE = """
SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id LIKE %s ORDER BY thread_id LIMIT 6
"""
SELECT_CHECKPOINTS_LIKE = """
SELECT checkpoint_id FROM checkpoints
WHERE thread_id = %s AND checkpoint_ns = '' AND checkpoint_id LIKE %s
ORDER BY checkpoint_id COLLATE "C" LIMIT 6
"""
SELECT_USER_THREADS = "SELECT id::text AS thread_id FROM conversations WHERE telegram_user_id = %s"
SELECT_OWNERS = """
SELECT id::text AS thread_id, telegram_user_id FROM conversations WHERE id = ANY(%s::uuid[])
"""


def _like(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


class CheckpointReader:
    """Read turns from the checkpoint tables without writing anything."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool
        # The product's saver: its serializer reads the values, and a committed replay
        # goes on with its channel versions.
        self.saver = PooledPostgresSaver(pool)

    async def resolve_thread(self, text: str) -> str:
        """Return the thread whose id is `text` or starts with it."""
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(SELECT_THREADS_LIKE, (_like(text),))).fetchall()
        ids = [r["thread_id"] for r in rows]
        if text in ids:
            return text
        if not ids:
            raise DevtoolsError(
                f"no checkpoints for thread {text!r}: see `tgagent runs list` for threads "
                "(a thread is a conversation id; /new deletes the old one's checkpoints)"
            )
        if len(ids) > 1:
            raise DevtoolsError(f"thread {text!r} is ambiguous: {', '.join(ids[:5])} ...")
        return str(ids[0])

    async def resolve_checkpoint(self, thread_id: str, text: str) -> str:
        """Return the checkpoint of the thread whose id is `text` or starts with it."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(SELECT_CHECKPOINTS_LIKE, (thread_id, _like(text)))
            ids = [r["checkpoint_id"] for r in await cur.fetchall()]
        if text in ids:
            return text
        if not ids:
            raise DevtoolsError(
                f"thread {thread_id} has no checkpoint {text!r} (it may have been pruned): "
                f"see `tgagent runs show {thread_id}`"
            )
        if len(ids) > 1:
            raise DevtoolsError(f"checkpoint {text!r} is ambiguous: {', '.join(ids[:5])} ...")
        return str(ids[0])

    async def turns(self, thread_id: str, since: str = "") -> list[Turn]:
        """Return the turns of the thread, oldest first (structure only, no values):
        all of them, or those starting at checkpoint `since` or later."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(SELECT_HEADERS, (thread_id, since))
            headers = await cur.fetchall()
            tasks = await (await conn.execute(SELECT_TASKS, (thread_id, since))).fetchall()
        steps = [
            Step(
                checkpoint_id=h["checkpoint_id"],
                parent_id=h["parent_checkpoint_id"],
                source=str(h["metadata"].get("source", "")),
                step=h["metadata"].get("step"),
                ts=datetime.fromisoformat(h["ts"]),
                metadata=dict(h["metadata"]),
                next_nodes=next_nodes(h["updated_channels"]),
            )
            for h in headers
        ]
        by_id = {s.checkpoint_id: s for s in steps}
        for t in tasks:
            step = by_id.get(t["checkpoint_id"])
            if step is not None:
                step.nodes.append(node_of(t["task_path"]))
                step.task_ids.append(t["task_id"])
                step.failed = step.failed or bool(t["failed"])
        turns = split_turns(thread_id, steps)
        await self._owners(turns)
        return turns

    async def recent_turns(self, user_id: int | None, limit: int) -> list[Turn]:
        """Return the newest `limit` turns over all threads (or one user's), newest first."""
        threads = None if user_id is None else await self.user_threads(user_id)
        result = await self.turns_at(await self.heads(threads, None, limit))
        for turn in result:
            await self.load_values(turn)
        return result

    async def user_threads(self, user_id: int) -> list[str]:
        """Return the ids of the user's (or group's) conversations."""
        if await missing_tables(self.pool, ("conversations",)):
            raise DevtoolsError(
                "--user needs the conversations table: run `tgagent db migrate`",
                EXIT_ENVIRONMENT,
            )
        async with self.pool.connection() as conn:
            owned = await (await conn.execute(SELECT_USER_THREADS, (user_id,))).fetchall()
        return [r["thread_id"] for r in owned]

    async def heads(
        self, threads: list[str] | None, before: str | None, limit: int
    ) -> list[tuple[str, str]]:
        """Return (thread, first checkpoint) of up to `limit` turns, newest first: in
        `threads` (None: every thread), older than checkpoint `before` (None: the newest)."""
        params = {
            "sources": list(HEAD_SOURCES),
            "threads": threads,
            "before": before,
            "limit": limit,
        }
        async with self.pool.connection() as conn:
            rows = await (await conn.execute(SELECT_HEADS, params)).fetchall()
        return [(r["thread_id"], r["checkpoint_id"]) for r in rows]

    async def turns_at(self, heads: list[tuple[str, str]]) -> list[Turn]:
        """Return the turns that start at `heads` (as `heads` returns them), in that
        order, structure only; reads each thread's checkpoints from its oldest head on."""
        oldest: dict[str, str] = {}
        for thread_id, checkpoint_id in heads:
            oldest[thread_id] = min(oldest.get(thread_id, checkpoint_id), checkpoint_id)
        found: dict[tuple[str, str], Turn] = {}
        for thread_id, since in oldest.items():
            for turn in await self.turns(thread_id, since):
                found[(thread_id, turn.head.checkpoint_id)] = turn
        return [found[head] for head in heads if head in found]

    async def load_values(self, turn: Turn) -> None:
        """Fill in the state at the turn's last checkpoint (and its input, if it has one)."""
        turn.values = dict(
            (await self.tuple(turn.thread_id, turn.last.checkpoint_id)).checkpoint["channel_values"]
        )
        if turn.head.next_nodes[:1] == ["__start__"]:
            head = await self.tuple(turn.thread_id, turn.head.checkpoint_id)
            turn.head_values = dict(head.checkpoint["channel_values"])
        if turn.user_id is None and isinstance(turn.values.get("user_id"), int):
            turn.user_id = turn.values["user_id"]

    async def tuple(self, thread_id: str, checkpoint_id: str) -> CheckpointTuple:
        """Return one checkpoint with its values and pending writes, deserialized."""
        config = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": "",
                "checkpoint_id": checkpoint_id,
            }
        }
        try:
            found = await self.saver.aget_tuple(config)  # type: ignore[arg-type]
        except Exception as exc:
            raise DevtoolsError(
                f"cannot read checkpoint {checkpoint_id}: {type(exc).__name__}: {exc} "
                "(written by another version of tgagent or LangGraph?)",
                EXIT_INCOMPATIBLE,
            ) from exc
        if found is None:
            raise DevtoolsError(f"checkpoint {checkpoint_id} vanished (pruned meanwhile?)")
        return found

    async def _owners(self, turns: list[Turn]) -> None:
        threads = {t.thread_id for t in turns}
        ids = []
        for thread_id in threads:
            try:
                ids.append(str(uuid.UUID(thread_id)))
            except ValueError:
                continue
        owners: dict[str, int] = {}
        if ids and not await missing_tables(self.pool, ("conversations",)):
            async with self.pool.connection() as conn:
                rows = await (await conn.execute(SELECT_OWNERS, (ids,))).fetchall()
            owners = {r["thread_id"]: r["telegram_user_id"] for r in rows}
        for turn in turns:
            turn.user_id = owners.get(turn.thread_id)
            turn.conversation_exists = turn.thread_id in owners
