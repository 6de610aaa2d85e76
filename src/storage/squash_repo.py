"""Squashes (seed 003): replace a run of messages with one summary, in one transaction."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from src.storage.base import Conn, Repository, clean_json, clean_text

# Row locks on the run itself: a concurrent squash of an overlapping run waits, then finds
# rows already squashed and fails cleanly. Appends are not blocked (the conversation row,
# whose lock serializes appends, is not touched: the summary reuses the run's first number).
LOCK_RUN = """
SELECT id, number, role, content, meta, created_at, squashed_at, summarized, facts_extracted
FROM messages
WHERE conversation_id = %s AND id = ANY(%s)
ORDER BY created_at, id
FOR UPDATE
"""
INSERT_LOG = """
INSERT INTO squash_log (conversation_id, replaced_ids, replaced_numbers, summary, requested_by)
VALUES (%s, %s, %s, %s, %s)
RETURNING id, created_at
"""
MARK_SQUASHED = """
UPDATE messages SET squashed_at = %s, squash_id = %s
WHERE conversation_id = %s AND id = ANY(%s)
"""
# created_at of the run's first message: ordering by (created_at, id) puts the summary
# exactly where the run stood (only the squashed original can tie with it). The summary
# is the model's text, so it is an assistant message (never system: it is no instruction),
# and it inherits the memory marks of what it replaced: it reaches the summarizer and the
# fact extractor only if some of the originals had not. When the running summary already
# holds some of them, the summary's text must not be folded (it would fold those twice):
# its meta names what the running summary still lacks (`unfolded`, see `unfolded_ids`),
# and the summarizer folds those originals in its stead.
INSERT_SUMMARY = """
INSERT INTO messages
    (conversation_id, number, role, content, created_at, meta, summarized, facts_extracted)
VALUES (%s, %s, 'assistant', %s, %s, %s, %s, %s)
RETURNING id, number, role, content, created_at, meta, summarized, facts_extracted
"""
LINK_SUMMARY = "UPDATE squash_log SET summary_message_id = %s WHERE id = %s"
# Seed 000's window counts messages; N messages became one, so the window shrinks by N-1
# and does not reach back past a /forget.
SHRINK_WINDOW = """
UPDATE users SET active_messages_count = GREATEST(0, active_messages_count - %s)
WHERE telegram_user_id = (
    SELECT telegram_user_id FROM conversations WHERE id = %s AND topic_id = 0
) AND active_messages_count IS NOT NULL
"""
# The same in a topic, whose conversation keeps its own count (0026).
SHRINK_TOPIC_WINDOW = """
UPDATE conversations SET active_messages_count = GREATEST(0, active_messages_count - %s)
WHERE id = %s AND topic_id <> 0 AND active_messages_count IS NOT NULL
"""
SELECT_ROWS = """
SELECT id, number, role, content, meta, created_at, squashed_at FROM messages
WHERE conversation_id = %s AND id = ANY(%s)
ORDER BY created_at, id
"""
NUMBER_STATUS = """
SELECT bool_or(squashed_at IS NULL) AS live FROM messages
WHERE conversation_id = %s AND number = %s
"""
SELECT_LOG = """
SELECT id, conversation_id, replaced_ids, replaced_numbers, summary_message_id, summary,
       requested_by, created_at
FROM squash_log WHERE conversation_id = %s ORDER BY created_at, id
"""


def unfolded_ids(row: dict[str, Any]) -> list[int] | None:
    """Return the ids of the originals a squash summary row stands for that the running
    summary does not hold yet, when it must fold them in its stead; else None (a message,
    or a summary whose own text may be folded)."""
    found = ((row.get("meta") or {}).get("frs_summary") or {}).get("unfolded")
    return [int(i) for i in found] if isinstance(found, list) else None


def _unfolded_of_run(rows: list[dict[str, Any]]) -> list[int] | None:
    """Return what the summary of `rows` must fold in its stead (see `unfolded_ids`): None
    when the running summary holds none of them, even through an earlier squash."""
    if not any(r["summarized"] or unfolded_ids(r) is not None for r in rows):
        return None
    lacking = [r for r in rows if not r["summarized"]]
    return [i for r in lacking for i in (unfolded_ids(r) or [r["id"]])]


class SquashConflict(Exception):
    """The messages to squash changed since they were shown (squashed or deleted)."""


@dataclass
class SquashResult:
    """What one squash did: its log id, the summary message, the replaced messages."""

    squash_id: int
    summary: dict[str, Any]
    replaced: list[dict[str, Any]]
    created_at: datetime


class SquashRepository(Repository):
    """The squash itself, the squash log, and the lookups the FRS tools need."""

    async def squash(
        self,
        conversation_id: uuid.UUID,
        message_ids: list[int],
        summary: str,
        requested_by: str,
        conn: Conn | None = None,
    ) -> SquashResult:
        """Replace the live messages `message_ids` with one summary message.

        One transaction: the originals are marked squashed, the summary is inserted where
        the first of them stood (the run is contiguous as the model saw it; a message a
        scored context left out stays live, after the summary), and the squash log row
        is written. Raises SquashConflict, changing nothing, if any of them is no longer
        live.
        """
        text = clean_text(summary).strip()
        if not text:
            raise ValueError("the summary is empty")
        ids = sorted(set(message_ids))
        if not ids:
            raise ValueError("nothing to squash")
        async with self._conn(conn) as c, c.transaction():
            rows = list(await (await c.execute(LOCK_RUN, (conversation_id, ids))).fetchall())
            if len(rows) != len(ids) or any(r["squashed_at"] is not None for r in rows):
                raise SquashConflict("some of these messages were already compressed or deleted")
            first = rows[0]
            numbers = [r["number"] for r in rows]
            log = await (
                await c.execute(
                    INSERT_LOG,
                    (conversation_id, [r["id"] for r in rows], numbers, text, requested_by),
                )
            ).fetchone()
            assert log is not None
            await c.execute(MARK_SQUASHED, (log["created_at"], log["id"], conversation_id, ids))
            meta: dict[str, Any] = {"squash_id": log["id"], "replaced": len(rows)}
            unfolded = _unfolded_of_run(rows)
            if unfolded:
                meta["unfolded"] = unfolded
            summary_row = await (
                await c.execute(
                    INSERT_SUMMARY,
                    (
                        conversation_id,
                        first["number"],
                        text,
                        first["created_at"],
                        Jsonb(clean_json({"frs_summary": meta})),
                        all(r["summarized"] for r in rows),
                        all(r["facts_extracted"] for r in rows),
                    ),
                )
            ).fetchone()
            assert summary_row is not None
            await c.execute(LINK_SUMMARY, (summary_row["id"], log["id"]))
            await c.execute(SHRINK_WINDOW, (len(rows) - 1, conversation_id))
            await c.execute(SHRINK_TOPIC_WINDOW, (len(rows) - 1, conversation_id))
        return SquashResult(log["id"], summary_row, rows, log["created_at"])

    async def rows(
        self, conversation_id: uuid.UUID, message_ids: list[int], conn: Conn | None = None
    ) -> dict[int, dict[str, Any]]:
        """Return the conversation's messages with these ids (squashed too), by id."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_ROWS, (conversation_id, list(message_ids)))
            return {r["id"]: r for r in await cur.fetchall()}

    async def number_status(
        self, conversation_id: uuid.UUID, number: int, conn: Conn | None = None
    ) -> str | None:
        """Return "live" or "squashed" for a message number, None if it never existed."""
        async with self._conn(conn) as c:
            row = await (await c.execute(NUMBER_STATUS, (conversation_id, number))).fetchone()
        if row is None or row["live"] is None:
            return None
        return "live" if row["live"] else "squashed"

    async def log(
        self, conversation_id: uuid.UUID, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the conversation's squash log, oldest first."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_LOG, (conversation_id,))
            return list(await cur.fetchall())
