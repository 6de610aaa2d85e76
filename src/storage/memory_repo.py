"""Long-term memory of a user: typed facts, session compacts, and search over history."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from src.storage.base import Conn, Repository, clean_text

FACT_TYPES = ("fact", "preference", "hypothesis", "constraint")

UPSERT_FACT = """
INSERT INTO facts (telegram_user_id, key, value, type, importance, source_conversation_id)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (telegram_user_id, key) DO UPDATE SET
    previous_value = CASE WHEN facts.value IS DISTINCT FROM EXCLUDED.value
                          THEN facts.value ELSE facts.previous_value END,
    value = EXCLUDED.value,
    type = EXCLUDED.type,
    importance = EXCLUDED.importance,
    source_conversation_id = EXCLUDED.source_conversation_id,
    updated_at = now()
RETURNING *
"""
SELECT_FACTS = """
SELECT * FROM facts WHERE telegram_user_id = %s
ORDER BY importance DESC, updated_at DESC LIMIT %s
"""
DELETE_FACTS = "DELETE FROM facts WHERE telegram_user_id = %s"

INSERT_COMPACT = """
INSERT INTO session_compacts (telegram_user_id, conversation_id, summary, topics, last_action)
VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (conversation_id) DO UPDATE SET
    summary = EXCLUDED.summary, topics = EXCLUDED.topics,
    last_action = EXCLUDED.last_action, created_at = now()
RETURNING *
"""
# Keep only the newest `keep` compacts of the user.
PRUNE_COMPACTS = """
DELETE FROM session_compacts WHERE telegram_user_id = %s AND id NOT IN (
    SELECT id FROM session_compacts WHERE telegram_user_id = %s
    ORDER BY created_at DESC, id DESC LIMIT %s
)
"""
SELECT_COMPACTS = """
SELECT * FROM session_compacts WHERE telegram_user_id = %s
ORDER BY created_at DESC, id DESC LIMIT %s
"""
DELETE_COMPACTS = "DELETE FROM session_compacts WHERE telegram_user_id = %s"

# The owner is joined in SQL, so no caller can reach another user's messages.
SEARCH_MESSAGES = """
SELECT m.id, m.conversation_id, m.role, m.content, m.created_at, m.squashed_at IS NOT NULL
       AS squashed
FROM messages m JOIN conversations c ON c.id = m.conversation_id
WHERE c.telegram_user_id = %s AND m.role IN ('user', 'assistant')
  AND (to_tsvector('simple', m.content) @@ plainto_tsquery('simple', %s)
       OR m.content ILIKE %s)
ORDER BY m.created_at DESC, m.id DESC LIMIT %s
"""


def _like_pattern(query: str) -> str:
    escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class MemoryRepository(Repository):
    """Facts, compacts and history search, always scoped to one owner id."""

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
        """Store a fact; a newer value for the same key replaces the old one."""
        if type_ not in FACT_TYPES:
            raise ValueError(f"fact type must be one of {FACT_TYPES}, not {type_!r}")
        importance = max(1, min(10, int(importance)))
        params = (
            telegram_user_id,
            clean_text(key.strip())[:200],
            clean_text(value.strip())[:2000],
            type_,
            importance,
            source_conversation_id,
        )
        async with self._conn(conn) as c:
            row = await (await c.execute(UPSERT_FACT, params)).fetchone()
            assert row is not None
            return row

    async def list_facts(
        self, telegram_user_id: int, limit: int = 100, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the user's facts, most important first."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_FACTS, (telegram_user_id, limit))
            return list(await cur.fetchall())

    async def delete_facts(self, telegram_user_id: int, conn: Conn | None = None) -> int:
        """Delete all the user's facts."""
        async with self._conn(conn) as c:
            return (await c.execute(DELETE_FACTS, (telegram_user_id,))).rowcount

    async def add_compact(
        self,
        telegram_user_id: int,
        conversation_id: uuid.UUID | None,
        summary: str,
        topics: Sequence[str],
        last_action: str,
        keep: int = 5,
        conn: Conn | None = None,
    ) -> dict[str, Any]:
        """Store a session compact and keep only the newest `keep` of the user."""
        params = (
            telegram_user_id,
            conversation_id,
            clean_text(summary),
            [clean_text(t)[:100] for t in topics][:20],
            clean_text(last_action)[:500],
        )
        async with self._conn(conn) as c, c.transaction():
            row = await (await c.execute(INSERT_COMPACT, params)).fetchone()
            await c.execute(PRUNE_COMPACTS, (telegram_user_id, telegram_user_id, keep))
            assert row is not None
            return row

    async def list_compacts(
        self, telegram_user_id: int, limit: int = 5, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the user's newest compacts, newest first."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_COMPACTS, (telegram_user_id, limit))
            return list(await cur.fetchall())

    async def delete_compacts(self, telegram_user_id: int, conn: Conn | None = None) -> int:
        """Delete all the user's compacts."""
        async with self._conn(conn) as c:
            return (await c.execute(DELETE_COMPACTS, (telegram_user_id,))).rowcount

    async def search_messages(
        self, telegram_user_id: int, query: str, limit: int = 10, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the user's messages matching `query`, newest first, squashed included."""
        query = clean_text(query).strip()
        if not query:
            return []
        limit = max(1, min(50, limit))
        async with self._conn(conn) as c:
            cur = await c.execute(
                SEARCH_MESSAGES, (telegram_user_id, query, _like_pattern(query), limit)
            )
            return list(await cur.fetchall())
