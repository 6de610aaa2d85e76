"""Bound checkpoint growth: keep the last N turns per conversation, drop the threads of
conversations that no longer exist. For `tgagent db prune` and the bot's daily job.

LangGraph's own `aprune(strategy="keep_latest")` keeps one checkpoint per thread; turns
need more (`runs show` and `replay` read every step), so this keeps whole turns. A turn
starts at a checkpoint whose `source` is "input", "fork" or "update" (see
`src.devtools.checkpoints`); checkpoint ids grow with time, so everything older than the
N-th newest turn start belongs to older turns. Blobs go only when a deleted checkpoint
used them and no kept one does, as in `aprune`, so a turn running meanwhile keeps its own;
a blob that refers to a deleted task write (see `src.storage.checkpointer`) takes its value.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from psycopg_pool import AsyncConnectionPool

from src.devtools.common import (
    CHECKPOINT_TABLES,
    EXIT_ENVIRONMENT,
    DevtoolsError,
    missing_tables,
)
from src.devtools.turns import HEAD_SOURCES
from src.storage.checkpoint_rows import RESOLVE_REFS

logger = logging.getLogger(__name__)

SELECT_ORPHAN_THREADS = """
SELECT t.thread_id FROM (
    SELECT thread_id FROM checkpoints
    UNION SELECT thread_id FROM checkpoint_writes
    UNION SELECT thread_id FROM checkpoint_blobs
) AS t
WHERE NOT EXISTS (SELECT 1 FROM conversations c WHERE c.id::text = t.thread_id)
"""
DELETE_THREADS = (
    "DELETE FROM checkpoint_writes WHERE thread_id = ANY(%s)",
    "DELETE FROM checkpoint_blobs WHERE thread_id = ANY(%s)",
    "DELETE FROM checkpoints WHERE thread_id = ANY(%s)",
)
SELECT_LONG_THREADS = """
SELECT thread_id FROM checkpoints
WHERE checkpoint_ns = '' AND metadata ->> 'source' = ANY(%s)
GROUP BY thread_id HAVING count(*) > %s
"""
# The oldest turn start to keep: the keep-th newest.
SELECT_CUTOFF = """
SELECT checkpoint_id FROM checkpoints
WHERE thread_id = %s AND checkpoint_ns = '' AND metadata ->> 'source' = ANY(%s)
ORDER BY checkpoint_id COLLATE "C" DESC OFFSET %s LIMIT 1
"""
SELECT_OLDER = """
SELECT checkpoint_id, metadata ->> 'source' = ANY(%s) AS head
FROM checkpoints
WHERE thread_id = %s AND checkpoint_ns = '' AND checkpoint_id COLLATE "C" < %s
"""
DELETE_WRITES = """
DELETE FROM checkpoint_writes
WHERE thread_id = %s AND checkpoint_ns = '' AND checkpoint_id = ANY(%s)
"""
DELETE_CHECKPOINTS = """
WITH deleted AS (
    DELETE FROM checkpoints
    WHERE thread_id = %s AND checkpoint_ns = '' AND checkpoint_id = ANY(%s)
    RETURNING checkpoint -> 'channel_versions' AS versions
)
SELECT DISTINCT v.key AS channel, v.value AS version
FROM deleted CROSS JOIN LATERAL jsonb_each_text(deleted.versions) AS v
"""
UNLINK_PARENTS = """
UPDATE checkpoints SET parent_checkpoint_id = NULL
WHERE thread_id = %s AND checkpoint_ns = '' AND parent_checkpoint_id = ANY(%s)
"""
SELECT_REFERENCED = """
SELECT DISTINCT v.key AS channel, v.value AS version
FROM checkpoints c CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
WHERE c.thread_id = %s AND c.checkpoint_ns = ''
"""
DELETE_BLOBS = """
DELETE FROM checkpoint_blobs
WHERE thread_id = %s AND checkpoint_ns = '' AND channel = %s AND version = ANY(%s)
"""


async def _prune_thread(
    pool: AsyncConnectionPool[Any], thread_id: str, keep: int, totals: dict[str, int]
) -> None:
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(SELECT_CUTOFF, (thread_id, list(HEAD_SOURCES), keep - 1))
        row = await cur.fetchone()
        if row is None:
            return
        older = await (
            await conn.execute(SELECT_OLDER, (list(HEAD_SOURCES), thread_id, row["checkpoint_id"]))
        ).fetchall()
        if not older:
            return
        ids = [r["checkpoint_id"] for r in older]
        # A kept checkpoint's value may be a reference to one of these writes.
        await conn.execute(RESOLVE_REFS, {"thread": thread_id, "checkpoints": ids})
        writes = await conn.execute(DELETE_WRITES, (thread_id, ids))
        totals["writes_deleted"] += writes.rowcount
        freed = await (await conn.execute(DELETE_CHECKPOINTS, (thread_id, ids))).fetchall()
        await conn.execute(UNLINK_PARENTS, (thread_id, ids))
        referenced = await (await conn.execute(SELECT_REFERENCED, (thread_id,))).fetchall()
        kept = {(r["channel"], r["version"]) for r in referenced}
        garbage: dict[str, list[str]] = defaultdict(list)
        for r in freed:
            if (r["channel"], r["version"]) not in kept:
                garbage[r["channel"]].append(r["version"])
        for channel, versions in garbage.items():
            blobs = await conn.execute(DELETE_BLOBS, (thread_id, channel, versions))
            totals["blobs_deleted"] += blobs.rowcount
        totals["checkpoints_deleted"] += len(ids)
        totals["turns_deleted"] += sum(1 for r in older if r["head"])
        totals["threads_pruned"] += 1


async def prune_checkpoints(pool: AsyncConnectionPool[Any], keep: int) -> dict[str, int]:
    """Keep the last `keep` turns of every conversation's thread; delete the threads of
    conversations that no longer exist. Return counts of what was deleted."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    missing = await missing_tables(pool, (*CHECKPOINT_TABLES, "conversations"))
    if missing:
        raise DevtoolsError(
            f"cannot prune: missing tables {', '.join(missing)} (nothing to prune before "
            "`tgagent db migrate` and the bot's first turn)",
            EXIT_ENVIRONMENT,
        )
    totals = dict.fromkeys(
        (
            "orphan_threads_deleted",
            "threads_pruned",
            "turns_deleted",
            "checkpoints_deleted",
            "writes_deleted",
            "blobs_deleted",
        ),
        0,
    )
    async with pool.connection() as conn:
        orphans = [
            r["thread_id"] for r in await (await conn.execute(SELECT_ORPHAN_THREADS)).fetchall()
        ]
        if orphans:
            async with conn.transaction():
                for sql in DELETE_THREADS:
                    await conn.execute(sql, (orphans,))
        totals["orphan_threads_deleted"] = len(orphans)
        cur = await conn.execute(SELECT_LONG_THREADS, (list(HEAD_SOURCES), keep))
        long_threads = [r["thread_id"] for r in await cur.fetchall()]
    for thread_id in long_threads:
        await _prune_thread(pool, thread_id, keep, totals)
    logger.info(
        "pruned checkpoints (keep %d turns): %s",
        keep,
        ", ".join(f"{k}={v}" for k, v in totals.items()),
    )
    return totals
