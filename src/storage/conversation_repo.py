"""Conversations and their messages (seed 004's ConversationRepository, async)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from src.storage.base import Conn, Repository, clean_json, clean_text
from src.storage.epochs import MemoryEpoch, still_holds

ROLES = frozenset({"user", "assistant", "tool", "system"})

# An owner's current conversation in one topic (0: General, or a chat without topics).
SELECT_LATEST_CONVERSATION = """
SELECT id, last_message_at, ended_at FROM conversations
WHERE telegram_user_id = %s AND topic_id = %s
ORDER BY created_at DESC, id DESC LIMIT 1
"""
INSERT_CONVERSATION = (
    "INSERT INTO conversations (id, telegram_user_id, topic_id) VALUES (%s, %s, %s)"
)
LOCK_USER = "SELECT pg_advisory_xact_lock(hashtextextended('tgagent-user:' || %s::text, 0))"
SELECT_CONVERSATION = "SELECT * FROM conversations WHERE id = %s"
SELECT_USER_CONVERSATION_IDS = "SELECT id FROM conversations WHERE telegram_user_id = %s"
SELECT_TOPIC_CONVERSATION_IDS = """
SELECT id FROM conversations WHERE telegram_user_id = %s AND topic_id = %s
ORDER BY created_at DESC, id DESC
"""
DELETE_TOPIC_CONVERSATIONS = (
    "DELETE FROM conversations WHERE telegram_user_id = %s AND topic_id = %s"
)
# One statement: the row lock on the conversation serializes concurrent appends, so
# numbers are unique and gapless (seed 003 variant 1) at one round trip per message.
# After /forget, seed 000's window counts every stored message (the owner's count in
# General and chats without topics, the conversation's own in a topic: 0026) (an unanswered one, a
# document kept to ask about later, a reminder), not only answered turns.
APPEND_MESSAGE = """
WITH n AS (
    UPDATE conversations
    SET next_message_number = next_message_number + 1, last_message_at = clock_timestamp(),
        active_messages_count = active_messages_count + 1
    WHERE id = %s
    RETURNING id, telegram_user_id, topic_id, next_message_number - 1 AS number,
        last_message_at
), counted AS (
    UPDATE users SET active_messages_count = active_messages_count + 1
    FROM n WHERE users.telegram_user_id = n.telegram_user_id AND n.topic_id = 0
      AND users.active_messages_count IS NOT NULL
)
INSERT INTO messages (conversation_id, number, role, content, meta, facts_extracted, created_at)
SELECT id, number, %s, %s, %s, %s, last_message_at FROM n
RETURNING id, number, role, content, created_at, meta, summarized, facts_extracted
"""
# MAX_STORAGE: beyond the newest `max_storage` live messages, delete the ones memory is
# done with (summarized and fact-extracted). Squash originals are never deleted: the
# squash log and search keep pointing at them.
TRIM_STORAGE = """
DELETE FROM messages WHERE id IN (
    SELECT id FROM messages WHERE conversation_id = %s AND squashed_at IS NULL
    ORDER BY created_at DESC, id DESC OFFSET %s
) AND summarized AND facts_extracted
"""
MESSAGE = """
SELECT id, number, role, content, created_at, meta, summarized, facts_extracted
FROM messages WHERE id = %s AND conversation_id = %s AND squashed_at IS NULL
"""
# Messages by id, squashed ones too (what a squash summary stands for), in thread order.
MESSAGES_BY_ID = """
SELECT id, number, role, content, created_at, meta, summarized, facts_extracted
FROM messages WHERE conversation_id = %s AND id = ANY(%s) ORDER BY created_at, id
"""
# Replies written after MCP tools' output, and which (src/graph/nodes.py: save_response).
RELAYS_OF = """
SELECT id, meta -> 'relays' AS relays FROM messages
WHERE id = ANY(%s) AND owner_id = %s AND meta ? 'relays'
"""
# Uses messages_conv_live_idx: cost depends on `limit`, not on the history's length.
LOAD_LAST_MESSAGES = """
SELECT * FROM (
    SELECT id, number, role, content, created_at, meta, summarized, facts_extracted
    FROM messages WHERE conversation_id = %s AND squashed_at IS NULL
    ORDER BY created_at DESC, id DESC LIMIT %s
) last ORDER BY created_at, id
"""
DELETE_CONVERSATION_MESSAGES = "DELETE FROM messages WHERE conversation_id = %s"
SET_SUMMARY = "UPDATE conversations SET summary = %s WHERE id = %s"
MARK_SUMMARIZED = """
UPDATE messages SET summarized = true WHERE conversation_id = %s AND id = ANY(%s)
"""
# A fold's guard: the summary it extended is still the stored one (the row lock makes a
# concurrent fold wait, then see the new summary), and its messages are still unsummarized.
SET_SUMMARY_IF = """
UPDATE conversations SET summary = %s WHERE id = %s AND summary = %s RETURNING id
"""
MARK_UNSUMMARIZED_SUMMARIZED = """
UPDATE messages SET summarized = true
WHERE conversation_id = %s AND id = ANY(%s) AND NOT summarized AND squashed_at IS NULL
"""
# /forget in a topic: its window starts afresh (in General the owner's count does, users_repo).
FORGET_TOPIC_WINDOW = """
UPDATE conversations SET active_messages_count = 0 WHERE id = %s AND topic_id <> 0
"""
# /forget: everything stored so far stays out of the summary for good.
MARK_ALL_SUMMARIZED = """
UPDATE messages SET summarized = true WHERE conversation_id = %s AND NOT summarized
"""
# ... nor in a compact: the current session ends where it is, without one.
END_SESSION_HERE = """
UPDATE conversations SET ended_at = last_message_at
WHERE id = %s AND last_message_at IS NOT NULL
  AND (ended_at IS NULL OR ended_at < last_message_at)
"""
MARK_FACTS_EXTRACTED = """
UPDATE messages SET facts_extracted = true WHERE conversation_id = %s AND id = ANY(%s)
"""
# /forget: what it forgets makes no facts either.
MARK_ALL_FACTS_EXTRACTED = """
UPDATE messages SET facts_extracted = true WHERE conversation_id = %s AND NOT facts_extracted
"""
END_CONVERSATION = "UPDATE conversations SET ended_at = now() WHERE id = %s AND ended_at IS NULL"
# Oldest first, in thread order; both use their partial index, so the cost is the
# backlog's, not the history's.
SELECT_UNSUMMARIZED = """
SELECT id, number, role, content, created_at, meta, summarized, facts_extracted FROM messages
WHERE conversation_id = %s AND squashed_at IS NULL AND NOT summarized
ORDER BY created_at, id LIMIT %s
"""
SELECT_FACTS_PENDING = """
SELECT id, number, role, content, created_at, meta, summarized, facts_extracted FROM messages
WHERE conversation_id = %s AND squashed_at IS NULL AND NOT facts_extracted
ORDER BY created_at, id LIMIT %s
"""
# A fact writer's guard: which of the rows it read still wait for extraction, locked
# until its transaction ends (a /forget or another extraction marking them waits, or
# came first and the writer stores nothing from them).
LOCK_FACTS_PENDING = """
SELECT id, number, role, content, created_at, meta, summarized, facts_extracted FROM messages
WHERE conversation_id = %s AND id = ANY(%s) AND NOT facts_extracted
ORDER BY created_at, id FOR UPDATE
"""
# The conversation and how many user messages wait for fact extraction (at most `cap`).
SELECT_CONVERSATION_WITH_PENDING = """
SELECT c.*, (
    SELECT count(*) FROM (
        SELECT 1 FROM messages m
        WHERE m.conversation_id = c.id AND m.squashed_at IS NULL AND NOT m.facts_extracted
          AND m.role = 'user'
        LIMIT %s
    ) p
) AS facts_pending
FROM conversations c WHERE c.id = %s
"""
# One session's live messages (seed 001): after the previous session's end, up to `until`;
# the newest `limit`, returned oldest first.
SELECT_SESSION = """
SELECT * FROM (
    SELECT id, number, role, content, created_at, meta, summarized, facts_extracted
    FROM messages
    WHERE conversation_id = %(conv)s AND squashed_at IS NULL
      AND (%(since)s::timestamptz IS NULL OR created_at > %(since)s::timestamptz)
      AND created_at <= %(until)s::timestamptz
    ORDER BY created_at DESC, id DESC LIMIT %(limit)s
) s ORDER BY created_at, id
"""
COUNT_MESSAGES = "SELECT count(*) AS n FROM messages WHERE conversation_id = %s"


class ConversationRepository(Repository):
    """Conversations per user (or group chat) and their ordered messages."""

    def __init__(self, pool: AsyncConnectionPool[Any], max_storage: int = 0) -> None:
        super().__init__(pool)
        self.max_storage = max_storage

    async def get_or_create_conversation(
        self, telegram_user_id: int, conn: Conn | None = None, topic: int = 0
    ) -> uuid.UUID:
        """Return the user's latest conversation in `topic`, creating one if there is none."""
        return uuid.UUID(str((await self.current(telegram_user_id, conn, topic))["id"]))

    async def current(
        self, telegram_user_id: int, conn: Conn | None = None, topic: int = 0
    ) -> dict[str, Any]:
        """Return the user's latest conversation in `topic` (id, last message time, end of
        its last ended session), creating one if there is none."""
        async with self._conn(conn) as c:
            # Nearly always there is one: a single round trip instead of the four of
            # the locked transaction below, which only creation needs.
            row = await (
                await c.execute(SELECT_LATEST_CONVERSATION, (telegram_user_id, topic))
            ).fetchone()
            if row is not None:
                return row
        async with self._conn(conn) as c, c.transaction():
            await c.execute(LOCK_USER, (telegram_user_id,))
            row = await (
                await c.execute(SELECT_LATEST_CONVERSATION, (telegram_user_id, topic))
            ).fetchone()
            if row is not None:
                return row
            new_id = uuid.uuid4()
            await c.execute(INSERT_CONVERSATION, (new_id, telegram_user_id, topic))
            return {"id": new_id, "last_message_at": None, "ended_at": None}

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
        async with self._conn(conn) as c:
            stored = await self.send_message(c, conversation_id, role, content, meta)
            return await stored()

    async def send_message(
        self,
        conn: Any,
        conversation_id: uuid.UUID,
        role: str,
        content: str,
        meta: dict[str, Any] | None = None,
    ) -> Callable[[], Awaitable[dict[str, Any]]]:
        """Send `append_message`'s statement over `conn` and return what reads the
        stored message back. In the caller's pipeline the statement is in its
        transaction and round trip; read it once the pipeline is synced."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {sorted(ROLES)}, not {role!r}")
        params = (
            conversation_id,
            role,
            clean_text(content),
            Jsonb(clean_json(meta)) if meta else None,
            # Only what the user and the assistant say carries facts about the user.
            role not in ("user", "assistant"),
        )
        cur = await conn.execute(APPEND_MESSAGE, params)

        async def stored() -> dict[str, Any]:
            row = await cur.fetchone()
            if row is None:
                raise LookupError(f"conversation {conversation_id} does not exist")
            if self.max_storage > 0 and row["number"] > self.max_storage:
                await conn.execute(TRIM_STORAGE, (conversation_id, self.max_storage))
            return row

        return stored

    async def message(
        self, conversation_id: uuid.UUID, message_id: int, conn: Conn | None = None
    ) -> dict[str, Any] | None:
        """Return one live message of the conversation, as `append_message` returns it."""
        async with self._conn(conn) as c:
            cur = await c.execute(MESSAGE, (message_id, conversation_id))
            return await cur.fetchone()

    async def messages_by_id(
        self, conversation_id: uuid.UUID, ids: list[int], conn: Conn | None = None
    ) -> dict[int, dict[str, Any]]:
        """Return the conversation's messages with these ids (squashed ones too), by id."""
        if not ids:
            return {}
        async with self._conn(conn) as c:
            cur = await c.execute(MESSAGES_BY_ID, (conversation_id, list(ids)))
            return {r["id"]: r for r in await cur.fetchall()}

    async def relays_of(self, owner: int, ids: list[int]) -> dict[int, list[str]]:
        """Return, of the owner's messages `ids`, the replies that relay MCP tools'
        output: by id, the tools' names."""
        if not ids:
            return {}
        async with self._conn() as c:
            cur = await c.execute(RELAYS_OF, (list(ids), owner))
            return {r["id"]: list(r["relays"]) for r in await cur.fetchall()}

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
        self, telegram_user_id: int, conn: Conn | None = None, topic: int = 0
    ) -> uuid.UUID:
        """Delete the user's conversations in `topic` (and their messages), then start a
        new one there; other topics keep theirs."""
        async with self._conn(conn) as c, c.transaction():
            await c.execute(LOCK_USER, (telegram_user_id,))
            await c.execute(DELETE_TOPIC_CONVERSATIONS, (telegram_user_id, topic))
            new_id = uuid.uuid4()
            await c.execute(INSERT_CONVERSATION, (new_id, telegram_user_id, topic))
            return new_id

    async def conversation_ids(
        self, telegram_user_id: int, conn: Conn | None = None, topic: int | None = None
    ) -> list[uuid.UUID]:
        """Return the ids of the user's conversations: all, or those of `topic` (newest
        first)."""
        sql, params = (
            (SELECT_USER_CONVERSATION_IDS, (telegram_user_id,))
            if topic is None
            else (SELECT_TOPIC_CONVERSATION_IDS, (telegram_user_id, topic))
        )
        async with self._conn(conn) as c:
            cur = await c.execute(sql, params)
            return [uuid.UUID(str(r["id"])) for r in await cur.fetchall()]

    async def clear_conversation_messages(
        self, conversation_id: uuid.UUID, conn: Conn | None = None
    ) -> int:
        """Delete every message of the conversation, keeping the conversation."""
        async with self._conn(conn) as c:
            cur = await c.execute(DELETE_CONVERSATION_MESSAGES, (conversation_id,))
            return cur.rowcount

    async def fold_into_summary(
        self,
        conversation_id: uuid.UUID,
        summary: str,
        message_ids: list[int],
        conn: Conn | None = None,
    ) -> None:
        """Store the running summary and mark the messages it now covers, atomically."""
        async with self._conn(conn) as c, c.transaction():
            await c.execute(SET_SUMMARY, (clean_text(summary), conversation_id))
            await c.execute(MARK_SUMMARIZED, (conversation_id, list(message_ids)))

    async def fold_summary(
        self,
        conversation_id: uuid.UUID,
        old: str,
        new: str,
        message_ids: list[int],
        conn: Conn | None = None,
        epoch: MemoryEpoch | None = None,
    ) -> bool:
        """Store `new` as the running summary and mark the messages it folded, if the
        stored summary is still `old`, none of the messages was folded or squashed
        meanwhile and the owner's memory is still at `epoch` (when given: no delete of
        memory came since the fold started); else change nothing. Return whether it
        was stored."""
        async with self._conn(conn) as c, c.transaction():
            # The conversation's row first, then the owner's (epochs.py): as storing a
            # message locks them.
            cur = await c.execute(SET_SUMMARY_IF, (clean_text(new), conversation_id, old))
            if await cur.fetchone() is not None and await still_holds(c, epoch):
                cur = await c.execute(
                    MARK_UNSUMMARIZED_SUMMARIZED, (conversation_id, list(message_ids))
                )
                if cur.rowcount == len(set(message_ids)):
                    return True
            raise psycopg.Rollback
        return False

    async def forget_summary(self, conversation_id: uuid.UUID, conn: Conn | None = None) -> None:
        """Empty the running summary; nothing stored so far will ever be summarized, or
        compacted (the current session ends here, without a compact)."""
        async with self._conn(conn) as c, c.transaction():
            await c.execute(SET_SUMMARY, ("", conversation_id))
            await c.execute(MARK_ALL_SUMMARIZED, (conversation_id,))
            await c.execute(END_SESSION_HERE, (conversation_id,))
            await c.execute(FORGET_TOPIC_WINDOW, (conversation_id,))

    async def mark_facts_extracted(
        self, conversation_id: uuid.UUID, message_ids: list[int], conn: Conn | None = None
    ) -> None:
        """Record that facts were extracted from these messages."""
        async with self._conn(conn) as c:
            await c.execute(MARK_FACTS_EXTRACTED, (conversation_id, list(message_ids)))

    async def skip_facts(self, conversation_id: uuid.UUID, conn: Conn | None = None) -> int:
        """Mark every message facts were not extracted from as done, without extracting
        them; return how many."""
        async with self._conn(conn) as c:
            return (await c.execute(MARK_ALL_FACTS_EXTRACTED, (conversation_id,))).rowcount

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
        self, conversation_id: uuid.UUID, limit: int, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return up to `limit` live messages not summarized yet, in thread order."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_UNSUMMARIZED, (conversation_id, limit))
            return list(await cur.fetchall())

    async def facts_pending(
        self, conversation_id: uuid.UUID, limit: int, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return up to `limit` live messages facts were not extracted from, in thread order."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_FACTS_PENDING, (conversation_id, limit))
            return list(await cur.fetchall())

    async def lock_facts_pending(
        self, conversation_id: uuid.UUID, message_ids: list[int], conn: Conn
    ) -> list[dict[str, Any]]:
        """Return those of the messages that still wait for fact extraction, in thread
        order, locked until `conn`'s transaction ends (call it inside one)."""
        cur = await conn.execute(LOCK_FACTS_PENDING, (conversation_id, list(message_ids)))
        return list(await cur.fetchall())

    async def conversation_for_turn(
        self, conversation_id: uuid.UUID, facts_every: int, conn: Conn | None = None
    ) -> dict[str, Any] | None:
        """Return the conversation with `facts_pending`: user messages awaiting fact
        extraction, counted up to `facts_every`."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_CONVERSATION_WITH_PENDING, (facts_every, conversation_id))
            return await cur.fetchone()

    async def session_messages(
        self,
        conversation_id: uuid.UUID,
        since: datetime | None,
        until: datetime,
        limit: int,
        conn: Conn | None = None,
    ) -> list[dict[str, Any]]:
        """Return the newest `limit` live messages in (since, until], oldest first."""
        params = {"conv": conversation_id, "since": since, "until": until, "limit": limit}
        async with self._conn(conn) as c:
            return list(await (await c.execute(SELECT_SESSION, params)).fetchall())
