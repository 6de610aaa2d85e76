"""Long-term memory of a user: typed facts and session compacts.

Every query names the owner (`telegram_user_id`) in SQL, so no caller can reach another
user's memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from src.storage.base import Conn, Repository, clean_text

FACT_TYPES = ("fact", "preference", "hypothesis", "constraint")

# One statement: the old value is read before the upsert (same snapshot), and a change
# is logged only when the value differs.
UPSERT_FACT = """
WITH old AS (
    SELECT value FROM facts WHERE telegram_user_id = %(user)s AND key = %(key)s
), up AS (
    INSERT INTO facts (telegram_user_id, key, value, type, importance, source_conversation_id)
    VALUES (%(user)s, %(key)s, %(value)s, %(type)s, %(importance)s, %(source)s)
    ON CONFLICT (telegram_user_id, key) DO UPDATE SET
        previous_value = CASE WHEN facts.value IS DISTINCT FROM EXCLUDED.value
                              THEN facts.value ELSE facts.previous_value END,
        value = EXCLUDED.value,
        type = EXCLUDED.type,
        importance = EXCLUDED.importance,
        source_conversation_id = EXCLUDED.source_conversation_id,
        updated_at = now()
    RETURNING *
), logged AS (
    INSERT INTO fact_changes (telegram_user_id, key, old_value, new_value, source_conversation_id)
    SELECT %(user)s, %(key)s, old.value, up.value, %(source)s FROM old, up
    WHERE old.value IS DISTINCT FROM up.value
)
SELECT * FROM up
"""
SELECT_FACTS = """
SELECT * FROM facts WHERE telegram_user_id = %s
ORDER BY importance DESC, updated_at DESC, id DESC LIMIT %s
"""
SELECT_FACT_KEYS = """
SELECT key FROM facts WHERE telegram_user_id = %s
ORDER BY importance DESC, updated_at DESC, id DESC LIMIT %s
"""
SELECT_FACT_CHANGES = """
SELECT * FROM fact_changes WHERE telegram_user_id = %s
ORDER BY changed_at DESC, id DESC LIMIT %s
"""
DELETE_FACTS = "DELETE FROM facts WHERE telegram_user_id = %s"
# MAX_FACTS: keep the most important facts, the most recently confirmed first among equals.
PRUNE_FACTS = """
DELETE FROM facts WHERE telegram_user_id = %s AND id NOT IN (
    SELECT id FROM facts WHERE telegram_user_id = %s
    ORDER BY importance DESC, updated_at DESC, id DESC LIMIT %s
)
"""
DELETE_FACT_CHANGES = "DELETE FROM fact_changes WHERE telegram_user_id = %s"
# Texts kept at /new for their facts (0016): deleted first, so a try in flight either
# finds its text gone or has committed its facts before they are deleted.
DELETE_PENDING_FACTS = "DELETE FROM pending_facts WHERE telegram_user_id = %s"
# Facts learned after `since` from another conversation than `source`: newer than a text
# kept at `since`, whose facts must not replace them.
SELECT_NEWER_FACT_KEYS = """
SELECT key FROM facts
WHERE telegram_user_id = %s AND updated_at > %s AND source_conversation_id IS DISTINCT FROM %s
"""

INSERT_COMPACT = """
INSERT INTO session_compacts
    (telegram_user_id, conversation_id, summary, topics, last_action, created_at)
VALUES (%s, %s, %s, %s, %s, COALESCE(%s, now()))
ON CONFLICT (conversation_id, created_at) DO UPDATE SET
    summary = EXCLUDED.summary, topics = EXCLUDED.topics, last_action = EXCLUDED.last_action
WHERE session_compacts.telegram_user_id = EXCLUDED.telegram_user_id
RETURNING *
"""
# A plain-text stand-in, stored while the model is slow, never replaces the model's compact.
INSERT_COMPACT_IF_NONE = """
INSERT INTO session_compacts
    (telegram_user_id, conversation_id, summary, topics, last_action, created_at)
VALUES (%s, %s, %s, %s, %s, COALESCE(%s, now()))
ON CONFLICT (conversation_id, created_at) DO NOTHING
RETURNING *
"""
# Keep only the newest `keep` compacts of the user.
PRUNE_COMPACTS = """
DELETE FROM session_compacts WHERE telegram_user_id = %s AND id NOT IN (
    SELECT id FROM session_compacts WHERE telegram_user_id = %s
    ORDER BY created_at DESC, id DESC LIMIT %s
)
"""
# The model's compact for a session whose plain-text stand-in is stored: never written
# back when the stand-in is gone (/memory clear, pruned) meanwhile.
REPLACE_COMPACT = """
UPDATE session_compacts SET summary = %s, topics = %s, last_action = %s
WHERE telegram_user_id = %s AND conversation_id = %s AND created_at = %s
RETURNING *
"""
SELECT_COMPACTS = """
SELECT * FROM session_compacts WHERE telegram_user_id = %s
ORDER BY created_at DESC, id DESC LIMIT %s
"""
DELETE_COMPACTS = "DELETE FROM session_compacts WHERE telegram_user_id = %s"


# Silent since `before`, with messages the session compact does not cover yet.
SELECT_IDLE_CONVERSATIONS = """
SELECT id, telegram_user_id, last_message_at FROM conversations
WHERE last_message_at < %s AND (ended_at IS NULL OR ended_at < last_message_at)
  AND (%s::timestamptz IS NULL OR (last_message_at, id) > (%s, %s::uuid))
ORDER BY last_message_at, id LIMIT %s
"""
MARK_SESSION_ENDED = "UPDATE conversations SET ended_at = %s WHERE id = %s"


def _compact_fields(
    summary: str, topics: Sequence[str], last_action: str
) -> tuple[str, list[str], str]:
    """Return a compact's summary, topics and last action as stored: clean, within limits."""
    return (
        clean_text(summary),
        [clean_text(t)[:100] for t in topics][:20],
        clean_text(last_action)[:500],
    )


class MemoryRepository(Repository):
    """Facts and compacts, always scoped to one owner id."""

    # --- facts -----------------------------------------------------------------------

    async def upsert_fact(
        self,
        telegram_user_id: int,
        key: str,
        value: str,
        type_: str = "fact",
        importance: int = 5,
        source_conversation_id: uuid.UUID | None = None,
        conn: Conn | None = None,
    ) -> dict[str, Any]:
        """Store a fact; a newer value for the same key replaces the old one (logged)."""
        if type_ not in FACT_TYPES:
            raise ValueError(f"fact type must be one of {FACT_TYPES}, not {type_!r}")
        params = {
            "user": telegram_user_id,
            "key": clean_text(key.strip())[:200],
            "value": clean_text(value.strip())[:2000],
            "type": type_,
            "importance": max(1, min(10, int(importance))),
            "source": source_conversation_id,
        }
        async with self._conn(conn) as c:
            row = await (await c.execute(UPSERT_FACT, params)).fetchone()
            assert row is not None
            return row

    async def upsert_facts(
        self,
        telegram_user_id: int,
        facts: Iterable[dict[str, Any]],
        source_conversation_id: uuid.UUID | None = None,
        keep: int = 0,
        conn: Conn | None = None,
    ) -> int:
        """Store extracted facts (key, value, type, importance) in one transaction.

        With `keep` > 0, only the user's `keep` most important facts remain afterwards.
        """
        stored = 0
        async with self._conn(conn) as c, c.transaction():
            for fact in facts:
                await self.upsert_fact(
                    telegram_user_id,
                    fact["key"],
                    fact["value"],
                    fact["type"],
                    fact["importance"],
                    source_conversation_id,
                    conn=c,
                )
                stored += 1
            if keep > 0:
                await c.execute(PRUNE_FACTS, (telegram_user_id, telegram_user_id, keep))
        return stored

    async def list_facts(
        self, telegram_user_id: int, limit: int = 100, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the user's facts, most important first (then the newest)."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_FACTS, (telegram_user_id, limit))
            return list(await cur.fetchall())

    async def fact_keys(
        self, telegram_user_id: int, limit: int = 100, conn: Conn | None = None
    ) -> list[str]:
        """Return the keys of the user's most important facts."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_FACT_KEYS, (telegram_user_id, limit))
            return [row["key"] for row in await cur.fetchall()]

    async def fact_changes(
        self, telegram_user_id: int, limit: int = 50, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the latest changes of the user's facts, newest first."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_FACT_CHANGES, (telegram_user_id, limit))
            return list(await cur.fetchall())

    async def newer_fact_keys(
        self,
        telegram_user_id: int,
        since: datetime,
        source_conversation_id: uuid.UUID | None,
        conn: Conn | None = None,
    ) -> list[str]:
        """Return the keys of facts learned after `since` from another conversation than
        `source_conversation_id`."""
        async with self._conn(conn) as c:
            params = (telegram_user_id, since, source_conversation_id)
            cur = await c.execute(SELECT_NEWER_FACT_KEYS, params)
            return [row["key"] for row in await cur.fetchall()]

    async def delete_facts(self, telegram_user_id: int, conn: Conn | None = None) -> int:
        """Delete all the user's facts, their change log and the texts kept for facts not
        extracted yet; return how many facts."""
        async with self._conn(conn) as c, c.transaction():
            await c.execute(DELETE_PENDING_FACTS, (telegram_user_id,))
            await c.execute(DELETE_FACT_CHANGES, (telegram_user_id,))
            return (await c.execute(DELETE_FACTS, (telegram_user_id,))).rowcount

    # --- session compacts (seed 001) ---------------------------------------------------

    async def add_compact(
        self,
        telegram_user_id: int,
        conversation_id: uuid.UUID | None,
        summary: str,
        topics: Sequence[str],
        last_action: str,
        keep: int = 5,
        conn: Conn | None = None,
        created_at: datetime | None = None,
        replace: bool = True,
    ) -> dict[str, Any] | None:
        """Store (or refresh) a session's compact; keep the user's newest `keep`.

        A session is identified by its conversation and `created_at`, the time of its
        last message: compacting the same session again replaces its compact, unless
        `replace` is false (then an existing compact stays).
        """
        params = (
            telegram_user_id,
            conversation_id,
            *_compact_fields(summary, topics, last_action),
            created_at,
        )
        async with self._conn(conn) as c, c.transaction():
            sql = INSERT_COMPACT if replace else INSERT_COMPACT_IF_NONE
            row = await (await c.execute(sql, params)).fetchone()
            await c.execute(PRUNE_COMPACTS, (telegram_user_id, telegram_user_id, keep))
            return row

    async def replace_compact(
        self,
        telegram_user_id: int,
        conversation_id: uuid.UUID,
        created_at: datetime,
        summary: str,
        topics: Sequence[str],
        last_action: str,
        conn: Conn | None = None,
    ) -> dict[str, Any] | None:
        """Replace the stored compact of the session (its conversation and `created_at`);
        return it, or None when there is none (it was deleted meanwhile)."""
        fields = _compact_fields(summary, topics, last_action)
        params = (*fields, telegram_user_id, conversation_id, created_at)
        async with self._conn(conn) as c:
            return await (await c.execute(REPLACE_COMPACT, params)).fetchone()

    async def list_compacts(
        self, telegram_user_id: int, limit: int = 5, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the compacts of the user's ended sessions, newest first."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_COMPACTS, (telegram_user_id, limit))
            return list(await cur.fetchall())

    async def delete_compacts(self, telegram_user_id: int, conn: Conn | None = None) -> int:
        """Delete all the user's compacts."""
        async with self._conn(conn) as c:
            return (await c.execute(DELETE_COMPACTS, (telegram_user_id,))).rowcount

    async def idle_conversations(
        self,
        silent_since: datetime,
        limit: int = 100,
        conn: Conn | None = None,
        after: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Return conversations silent since `silent_since` whose session is not compacted,
        oldest first; `after` (a row of the previous page) continues past it."""
        at, after_id = (after["last_message_at"], after["id"]) if after else (None, None)
        async with self._conn(conn) as c:
            params = (silent_since, at, at, after_id, limit)
            cur = await c.execute(SELECT_IDLE_CONVERSATIONS, params)
            return list(await cur.fetchall())

    async def mark_session_ended(
        self, conversation_id: uuid.UUID, at: datetime, conn: Conn | None = None
    ) -> None:
        """Record that the session compact covers the conversation up to `at`."""
        async with self._conn(conn) as c:
            await c.execute(MARK_SESSION_ENDED, (at, conversation_id))
