"""Conversations and their messages (seed 004's ConversationRepository, async)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from src.storage.base import Conn, Repository, clean_text

ROLES = frozenset({"user", "assistant", "tool", "system"})

SELECT_LATEST_CONVERSATION = """
SELECT id FROM conversations WHERE telegram_user_id = %s
ORDER BY created_at DESC, id DESC LIMIT 1
"""
INSERT_CONVERSATION = "INSERT INTO conversations (id, telegram_user_id) VALUES (%s, %s)"
LOCK_USER = "SELECT pg_advisory_xact_lock(hashtextextended('tgagent-user:' || %s::text, 0))"
SELECT_CONVERSATION = "SELECT * FROM conversations WHERE id = %s"
SELECT_USER_CONVERSATION_IDS = "SELECT id FROM conversations WHERE telegram_user_id = %s"
DELETE_USER_CONVERSATIONS = "DELETE FROM conversations WHERE telegram_user_id = %s"
# One statement: the row lock on the conversation serializes concurrent appends, so
# numbers are unique and gapless (seed 003 variant 1) at one round trip per message.
APPEND_MESSAGE = """
WITH n AS (
    UPDATE conversations
    SET next_message_number = next_message_number + 1, last_message_at = clock_timestamp()
    WHERE id = %s
    RETURNING id, next_message_number - 1 AS number
)
INSERT INTO messages (conversation_id, number, role, content, meta)
SELECT id, number, %s, %s, %s FROM n
RETURNING id, number, role, content, created_at, meta
"""
TRIM_STORAGE = """
DELETE FROM messages WHERE id IN (
    SELECT id FROM messages WHERE conversation_id = %s
    ORDER BY created_at DESC, id DESC OFFSET %s
)
"""
# Uses messages_conv_live_idx: cost depends on `limit`, not on the history's length.
LOAD_LAST_MESSAGES = """
SELECT * FROM (
    SELECT id, number, role, content, created_at, meta FROM messages
    WHERE conversation_id = %s AND squashed_at IS NULL
    ORDER BY created_at DESC, id DESC LIMIT %s
) last ORDER BY created_at, id
"""
DELETE_CONVERSATION_MESSAGES = "DELETE FROM messages WHERE conversation_id = %s"
UPDATE_SUMMARY = """
UPDATE conversations SET summary = %s, summary_upto_id = GREATEST(summary_upto_id, %s)
WHERE id = %s
"""
END_CONVERSATION = "UPDATE conversations SET ended_at = now() WHERE id = %s AND ended_at IS NULL"
# Oldest first, from where the running summary stops; bounded by `limit`.
SELECT_UNSUMMARIZED = """
SELECT id, number, role, content, created_at, meta FROM messages
WHERE conversation_id = %s AND squashed_at IS NULL AND id > %s
ORDER BY created_at, id LIMIT %s
"""
SELECT_MAX_ID = "SELECT COALESCE(max(id), 0) AS id FROM messages WHERE conversation_id = %s"
COUNT_MESSAGES = "SELECT count(*) AS n FROM messages WHERE conversation_id = %s"


class ConversationRepository(Repository):
    """Conversations per user (or group chat) and their ordered messages."""

    def __init__(self, pool: AsyncConnectionPool[Any], max_storage: int = 0) -> None:
        super().__init__(pool)
        self.max_storage = max_storage

    async def get_or_create_conversation(
        self, telegram_user_id: int, conn: Conn | None = None
    ) -> uuid.UUID:
        """Return the user's latest conversation, creating one if there is none."""
        async with self._conn(conn) as c:
            # Nearly always there is one: a single round trip instead of the four of
            # the locked transaction below, which only creation needs.
            row = await (
                await c.execute(SELECT_LATEST_CONVERSATION, (telegram_user_id,))
            ).fetchone()
            if row is not None:
                return uuid.UUID(str(row["id"]))
        async with self._conn(conn) as c, c.transaction():
            await c.execute(LOCK_USER, (telegram_user_id,))
            row = await (
                await c.execute(SELECT_LATEST_CONVERSATION, (telegram_user_id,))
            ).fetchone()
            if row is not None:
                return uuid.UUID(str(row["id"]))
            new_id = uuid.uuid4()
            await c.execute(INSERT_CONVERSATION, (new_id, telegram_user_id))
            return new_id

    async def get_conversation(
        self, conversation_id: uuid.UUID, conn: Conn | None = None
    ) -> dict[str, Any] | None:
        """Return the conversation row (summary, counters), or None."""
        async with self._conn(conn) as c:
            return await (await c.execute(SELECT_CONVERSATION, (conversation_id,))).fetchone()

    async def append_message(
        self,
        conversation_id: uuid.UUID,
        role: str,
        content: str,
        meta: dict[str, Any] | None = None,
        conn: Conn | None = None,
    ) -> dict[str, Any]:
        """Store one message and return it with its id, number and time."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {sorted(ROLES)}, not {role!r}")
        params = (
            conversation_id,
            role,
            clean_text(content),
            Jsonb(json.loads(clean_text(json.dumps(meta)))) if meta else None,
        )
        async with self._conn(conn) as c:
            row = await (await c.execute(APPEND_MESSAGE, params)).fetchone()
            if row is None:
                raise LookupError(f"conversation {conversation_id} does not exist")
            if self.max_storage > 0 and row["number"] > self.max_storage:
                await c.execute(TRIM_STORAGE, (conversation_id, self.max_storage))
            return row

    async def load_last_messages(
        self, conversation_id: uuid.UUID, limit: int = 30, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the last `limit` live messages, oldest first (by created_at, id)."""
        if limit <= 0:
            return []
        async with self._conn(conn) as c:
            cur = await c.execute(LOAD_LAST_MESSAGES, (conversation_id, limit))
            return list(await cur.fetchall())

    async def create_new_conversation(
        self, telegram_user_id: int, conn: Conn | None = None
    ) -> uuid.UUID:
        """Delete the user's conversations (and their messages), then start a new one."""
        async with self._conn(conn) as c, c.transaction():
            await c.execute(LOCK_USER, (telegram_user_id,))
            await c.execute(DELETE_USER_CONVERSATIONS, (telegram_user_id,))
            new_id = uuid.uuid4()
            await c.execute(INSERT_CONVERSATION, (new_id, telegram_user_id))
            return new_id

    async def conversation_ids(
        self, telegram_user_id: int, conn: Conn | None = None
    ) -> list[uuid.UUID]:
        """Return the ids of all the user's conversations."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_USER_CONVERSATION_IDS, (telegram_user_id,))
            return [uuid.UUID(str(r["id"])) for r in await cur.fetchall()]

    async def clear_conversation_messages(
        self, conversation_id: uuid.UUID, conn: Conn | None = None
    ) -> int:
        """Delete every message of the conversation, keeping the conversation."""
        async with self._conn(conn) as c:
            cur = await c.execute(DELETE_CONVERSATION_MESSAGES, (conversation_id,))
            return cur.rowcount

    async def update_summary(
        self, conversation_id: uuid.UUID, summary: str, upto_id: int, conn: Conn | None = None
    ) -> None:
        """Store the running summary and the last message id it covers."""
        async with self._conn(conn) as c:
            await c.execute(UPDATE_SUMMARY, (clean_text(summary), upto_id, conversation_id))

    async def end_conversation(self, conversation_id: uuid.UUID, conn: Conn | None = None) -> None:
        """Mark the conversation ended (its session was compacted)."""
        async with self._conn(conn) as c:
            await c.execute(END_CONVERSATION, (conversation_id,))

    async def count_messages(self, conversation_id: uuid.UUID, conn: Conn | None = None) -> int:
        """Return how many messages the conversation holds, squashed ones included."""
        async with self._conn(conn) as c:
            row = await (await c.execute(COUNT_MESSAGES, (conversation_id,))).fetchone()
            return int(row["n"]) if row else 0

    async def unsummarized(
        self, conversation_id: uuid.UUID, after_id: int, limit: int, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return up to `limit` live messages after `after_id`, oldest first."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_UNSUMMARIZED, (conversation_id, after_id, limit))
            return list(await cur.fetchall())

    async def max_message_id(self, conversation_id: uuid.UUID, conn: Conn | None = None) -> int:
        """Return the id of the conversation's newest message (0 if none)."""
        async with self._conn(conn) as c:
            row = await (await c.execute(SELECT_MAX_ID, (conversation_id,))).fetchone()
            return int(row["id"]) if row else 0
