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
# A fact's value is one line of at most this many characters (fact_value).
FACT_VALUE_CHARS = 200
FACT_KEY_CHARS = 64
# The member of a fact that is the owner's own: a private chat's user's, a group's.
GROUP = 0
# Closed values kept per key: the history /memory shows, bounded.
HISTORY_PER_KEY = 5
# A changed value and a concurrent writer: the upsert is tried again this many times.
UPSERT_TRIES = 3

# Facts with a history (0017): a row is one value of a key, current while valid_to is
# NULL. A changed value closes the current row; the new one is inserted beside it.
CLOSE_CHANGED_FACT = """
UPDATE facts SET valid_to = now(), updated_at = now()
WHERE telegram_user_id = %(user)s AND member_id = %(member)s AND key = %(key)s
  AND valid_to IS NULL
  AND value <> %(value)s
"""
# The current row: inserted, or confirmed when it holds the same value. Nothing comes
# back when a concurrent writer made another value current meanwhile (tried again).
UPSERT_CURRENT_FACT = """
INSERT INTO facts
    (telegram_user_id, member_id, key, value, type, importance, source_conversation_id)
VALUES (%(user)s, %(member)s, %(key)s, %(value)s, %(type)s, %(importance)s, %(source)s)
ON CONFLICT (telegram_user_id, member_id, key) WHERE valid_to IS NULL DO UPDATE SET
    type = EXCLUDED.type,
    importance = EXCLUDED.importance,
    source_conversation_id = EXCLUDED.source_conversation_id,
    updated_at = now()
WHERE facts.value = EXCLUDED.value
RETURNING *
"""
SELECT_FACTS = """
SELECT * FROM facts WHERE telegram_user_id = %s AND member_id = ANY(%s) AND valid_to IS NULL
ORDER BY importance DESC, updated_at DESC, id DESC LIMIT %s
"""
# The current facts with the value each replaced and when (/memory); LIMIT NULL: all.
SELECT_FACTS_WITH_PREVIOUS = """
SELECT f.*, p.value AS previous_value, p.valid_to AS previous_until
FROM facts f
LEFT JOIN LATERAL (
    SELECT h.value, h.valid_to FROM facts h
    WHERE h.telegram_user_id = f.telegram_user_id AND h.member_id = f.member_id
      AND h.key = f.key AND h.valid_to IS NOT NULL
    ORDER BY h.valid_to DESC, h.id DESC LIMIT 1
) p ON true
WHERE f.telegram_user_id = %s AND f.member_id = ANY(%s) AND f.valid_to IS NULL
ORDER BY f.importance DESC, f.updated_at DESC, f.id DESC LIMIT %s
"""
SELECT_FACT_KEYS = """
SELECT key FROM facts WHERE telegram_user_id = %s AND member_id = %s AND valid_to IS NULL
ORDER BY importance DESC, updated_at DESC, id DESC LIMIT %s
"""
# Each closed value with the value that replaced it (a value begins as the one before
# it ends: one transaction closes one and inserts the other).
SELECT_FACT_CHANGES = """
SELECT h.id, h.telegram_user_id, h.key, h.value AS old_value, n.value AS new_value,
       n.source_conversation_id, h.valid_to AS changed_at
FROM facts h
JOIN LATERAL (
    SELECT value, source_conversation_id FROM facts n
    WHERE n.telegram_user_id = h.telegram_user_id AND n.member_id = h.member_id
      AND n.key = h.key
      AND n.id <> h.id AND n.created_at >= h.valid_to
    ORDER BY n.created_at, n.id LIMIT 1
) n ON true
WHERE h.telegram_user_id = %s AND h.valid_to IS NOT NULL
ORDER BY h.valid_to DESC, h.id DESC LIMIT %s
"""
DELETE_FACTS = "DELETE FROM facts WHERE telegram_user_id = %s RETURNING valid_to"
# MAX_FACTS: keep the most important current facts, the most recently confirmed first
# among equals; a key that goes takes its history with it. Each key keeps its
# HISTORY_PER_KEY newest closed values.
PRUNE_FACTS = """
DELETE FROM facts WHERE telegram_user_id = %(user)s AND member_id = %(member)s AND key IN (
    SELECT key FROM facts
    WHERE telegram_user_id = %(user)s AND member_id = %(member)s AND valid_to IS NULL
    ORDER BY importance DESC, updated_at DESC, id DESC OFFSET %(keep)s
)
"""
PRUNE_HISTORY = """
DELETE FROM facts WHERE id IN (
    SELECT id FROM (
        SELECT id, row_number() OVER (PARTITION BY key ORDER BY valid_to DESC, id DESC) AS n
        FROM facts
        WHERE telegram_user_id = %(user)s AND member_id = %(member)s AND valid_to IS NOT NULL
    ) h WHERE n > %(keep)s
)
"""
# Texts kept at /new for their facts (0016): deleted first, so a try in flight either
# finds its text gone or has committed its facts before they are deleted.
DELETE_PENDING_FACTS = "DELETE FROM pending_facts WHERE telegram_user_id = %s"
# Facts learned after `since` from another conversation than `source`: newer than a text
# kept at `since`, whose facts must not replace them.
SELECT_NEWER_FACT_KEYS = """
SELECT key FROM facts
WHERE telegram_user_id = %s AND member_id = %s AND valid_to IS NULL AND updated_at > %s
  AND source_conversation_id IS DISTINCT FROM %s
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
# Keep only the newest `keep` compacts of the user in the topic of the row just stored
# (0025: a busy topic does not push another topic's compacts out).
PRUNE_COMPACTS = """
DELETE FROM session_compacts WHERE telegram_user_id = %(user)s AND topic_id = %(topic)s
  AND id NOT IN (
    SELECT id FROM session_compacts WHERE telegram_user_id = %(user)s AND topic_id = %(topic)s
    ORDER BY created_at DESC, id DESC LIMIT %(keep)s
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
# The compacts of the topic a conversation is in (the turn's prompt, recall by default).
SELECT_TOPIC_COMPACTS = """
SELECT * FROM session_compacts WHERE telegram_user_id = %s
  AND topic_id = COALESCE((SELECT topic_id FROM conversations WHERE id = %s), 0)
ORDER BY created_at DESC, id DESC LIMIT %s
"""
DELETE_COMPACTS = "DELETE FROM session_compacts WHERE telegram_user_id = %s"
SELECT_CONVERSATION_TOPIC = "SELECT topic_id FROM conversations WHERE id = %s"


# Silent since `before`, with messages the session compact does not cover yet.
SELECT_IDLE_CONVERSATIONS = """
SELECT id, telegram_user_id, last_message_at FROM conversations
WHERE last_message_at < %s AND (ended_at IS NULL OR ended_at < last_message_at)
  AND (%s::timestamptz IS NULL OR (last_message_at, id) > (%s, %s::uuid))
ORDER BY last_message_at, id LIMIT %s
"""
MARK_SESSION_ENDED = "UPDATE conversations SET ended_at = %s WHERE id = %s"


def fact_value(text: Any) -> str:
    """Return a fact's value as it is stored and shown: storable, one line, whitespace
    collapsed, at most FACT_VALUE_CHARS characters (cut between words, ending in "…")."""
    line = " ".join(clean_text(str(text)).split())
    if len(line) <= FACT_VALUE_CHARS:
        return line
    head = line[: FACT_VALUE_CHARS - 1]
    if " " in head[FACT_VALUE_CHARS // 2 :]:
        head = head.rsplit(" ", 1)[0]
    return head.rstrip() + "…"


def fact_key(text: Any) -> str:
    """Return a fact's key as it is stored: storable, one line, at most FACT_KEY_CHARS."""
    return " ".join(clean_text(str(text)).split())[:FACT_KEY_CHARS]


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
        member: int = GROUP,
    ) -> dict[str, Any]:
        """Store a fact as its key's current value (`fact_value`); a changed value closes
        the old one, which stays as the key's history. Return the current row.
        `member`: in a group, the member whose fact it is (GROUP: the group's own)."""
        if type_ not in FACT_TYPES:
            raise ValueError(f"fact type must be one of {FACT_TYPES}, not {type_!r}")
        params = {
            "user": telegram_user_id,
            "member": member,
            "key": fact_key(key),
            "value": fact_value(value),
            "type": type_,
            "importance": max(1, min(10, int(importance))),
            "source": source_conversation_id,
        }
        if not params["key"] or not params["value"]:
            raise ValueError("a fact needs a key and a value")
        async with self._conn(conn) as c, c.transaction():
            for _ in range(UPSERT_TRIES):
                await c.execute(CLOSE_CHANGED_FACT, params)
                row = await (await c.execute(UPSERT_CURRENT_FACT, params)).fetchone()
                if row is not None:
                    return row
        raise RuntimeError(f"the fact {key!r} of {telegram_user_id} kept changing meanwhile")

    async def upsert_facts(
        self,
        telegram_user_id: int,
        facts: Iterable[dict[str, Any]],
        source_conversation_id: uuid.UUID | None = None,
        keep: int = 0,
        conn: Conn | None = None,
        member: int = GROUP,
    ) -> int:
        """Store extracted facts (key, value, type, importance) of the owner's `member`
        (GROUP: the owner's own) in one transaction; return how many. (A delete of a
        fact goes through src/storage/erasure_repo.py.)

        With `keep` > 0, only the member's `keep` most important facts remain afterwards;
        each key keeps its HISTORY_PER_KEY newest old values.
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
                    member=member,
                )
                stored += 1
            prune = {"user": telegram_user_id, "member": member, "keep": keep}
            if keep > 0:
                await c.execute(PRUNE_FACTS, prune)
            await c.execute(PRUNE_HISTORY, prune | {"keep": HISTORY_PER_KEY})
        return stored

    async def list_facts(
        self,
        telegram_user_id: int,
        limit: int = 100,
        conn: Conn | None = None,
        members: Sequence[int] = (GROUP,),
    ) -> list[dict[str, Any]]:
        """Return the `members`' current facts, most important first (then the newest)."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_FACTS, (telegram_user_id, list(members), limit))
            return list(await cur.fetchall())

    async def facts_with_previous(
        self,
        telegram_user_id: int,
        limit: int | None = None,
        conn: Conn | None = None,
        members: Sequence[int] = (GROUP,),
    ) -> list[dict[str, Any]]:
        """Return the current facts of the owner's `members` (all, or `limit`), most
        important first, each with the value it replaced (`previous_value`) and until
        when (`previous_until`)."""
        async with self._conn(conn) as c:
            params = (telegram_user_id, list(members), limit)
            cur = await c.execute(SELECT_FACTS_WITH_PREVIOUS, params)
            return list(await cur.fetchall())

    async def fact_keys(
        self,
        telegram_user_id: int,
        limit: int | None = 100,
        conn: Conn | None = None,
        member: int = GROUP,
    ) -> list[str]:
        """Return the keys of the `member`'s most important current facts (None: all)."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_FACT_KEYS, (telegram_user_id, member, limit))
            return [row["key"] for row in await cur.fetchall()]

    async def fact_changes(
        self, telegram_user_id: int, limit: int = 50, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the latest changes of the user's facts, newest first: each old value
        (`old_value`) with the one that replaced it (`new_value`) and when."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_FACT_CHANGES, (telegram_user_id, limit))
            return list(await cur.fetchall())

    async def newer_fact_keys(
        self,
        telegram_user_id: int,
        since: datetime,
        source_conversation_id: uuid.UUID | None,
        conn: Conn | None = None,
        member: int = GROUP,
    ) -> list[str]:
        """Return the keys of the `member`'s facts learned after `since` from another
        conversation than `source_conversation_id`."""
        async with self._conn(conn) as c:
            params = (telegram_user_id, member, since, source_conversation_id)
            cur = await c.execute(SELECT_NEWER_FACT_KEYS, params)
            return [row["key"] for row in await cur.fetchall()]

    async def delete_facts(self, telegram_user_id: int, conn: Conn | None = None) -> int:
        """Delete all the user's facts, their history and the texts kept for facts not
        extracted yet; return how many current facts."""
        async with self._conn(conn) as c, c.transaction():
            await c.execute(DELETE_PENDING_FACTS, (telegram_user_id,))
            cur = await c.execute(DELETE_FACTS, (telegram_user_id,))
            return sum(row["valid_to"] is None for row in await cur.fetchall())

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
            topic = row["topic_id"] if row is not None else await self._topic(c, conversation_id)
            prune = {"user": telegram_user_id, "topic": topic, "keep": keep}
            await c.execute(PRUNE_COMPACTS, prune)
            return row

    @staticmethod
    async def _topic(conn: Any, conversation_id: uuid.UUID | None) -> int:
        """Return the topic of a conversation (0: General, none, or gone)."""
        cur = await conn.execute(SELECT_CONVERSATION_TOPIC, (conversation_id,))
        row = await cur.fetchone()
        return int(row["topic_id"]) if row is not None else 0

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
        self,
        telegram_user_id: int,
        limit: int = 5,
        conn: Conn | None = None,
        conversation_id: uuid.UUID | None = None,
    ) -> list[dict[str, Any]]:
        """Return the compacts of the user's ended sessions, newest first: all, or with
        `conversation_id` those of its topic."""
        sql, params = (
            (SELECT_COMPACTS, (telegram_user_id, limit))
            if conversation_id is None
            else (SELECT_TOPIC_COMPACTS, (telegram_user_id, conversation_id, limit))
        )
        async with self._conn(conn) as c:
            cur = await c.execute(sql, params)
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
