"""The inbox (updates stored before they are acknowledged) and the outbox (replies stored
before they are sent), with the job queue's deferral in the inbox's transaction."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from src.storage.base import Conn, Repository, clean_text

# The job queue's (procrastinate's) queue, and the task that runs one stored update.
QUEUE = "tgagent_updates"
UPDATE_TASK = "tgagent.handle_update"

# The queue's job for each new update is deferred in the transaction that stores it:
# procrastinate's own SQL function (its public, versioned defer procedure), so a crash
# leaves either both or neither. Jobs of one chat share a lock: procrastinate runs them
# one at a time, in the order they were deferred, across every worker process. An update
# whose row /erase deleted (its id kept in `inbox_erased`) is refused like a stored one.
STORE_UPDATES = """
INSERT INTO inbox (update_id, chat_id, payload, media_group_id)
SELECT u.* FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::text[])
    AS u(update_id, chat_id, payload, media_group_id)
WHERE NOT EXISTS (SELECT 1 FROM inbox_erased e WHERE e.update_id = u.update_id)
ORDER BY 1
ON CONFLICT (update_id) DO NOTHING
RETURNING update_id, chat_id
"""
DEFER_JOBS = """
SELECT procrastinate_defer_jobs_v1(ARRAY(
    SELECT ROW(%s, %s, 0, u.lock, NULL, jsonb_build_object('update_id', u.id), NULL)
           ::procrastinate_job_to_defer_v1
    FROM unnest(%s::bigint[], %s::text[]) WITH ORDINALITY AS u(id, lock, n)
    ORDER BY u.n
))
"""
INBOX_ROW = "SELECT * FROM inbox WHERE update_id = %s"
MESSAGE_ID = "SELECT message_id FROM inbox WHERE update_id = %s"
RECORD_MESSAGE = "UPDATE inbox SET message_id = %s WHERE update_id = %s"
FINISH = "UPDATE inbox SET done_at = now() WHERE update_id = %s AND done_at IS NULL"
# The other updates of an album not yet answered, and how long ago the newest arrived.
ALBUM = """
SELECT update_id, payload, extract(epoch FROM clock_timestamp() - received_at) AS age
FROM inbox
WHERE chat_id = %s AND media_group_id = %s AND done_at IS NULL AND update_id <> %s
ORDER BY update_id
"""
# An album's other updates become part of its first one's stored message: done.
CONSUME = """
UPDATE inbox SET message_id = %s, done_at = now()
WHERE update_id = ANY(%s) AND done_at IS NULL
"""
# A redelivery is refused by update_id for as long as the row is kept: Telegram keeps an
# unacknowledged update for 24 hours, so two days is safely past any redelivery.
PRUNE = """
WITH gone AS (DELETE FROM inbox WHERE done_at < now() - %s),
erased AS (DELETE FROM inbox_erased WHERE erased_at < now() - %s)
DELETE FROM outbox WHERE status <> 'pending' AND created_at < now() - %s
"""

# An update's outbox rows: its reply (kind 'reply') and the messages its turn sends
# beside it (kinds such as 'heard', 'ack', 'problem:0'), each stored once.
ADD_REPLY = """
INSERT INTO outbox (update_id, chat_id, thread_id, reply_to, text, fmt, kind)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (update_id, kind) DO NOTHING
"""
REPLY = "SELECT * FROM outbox WHERE update_id = %s AND kind = %s"
RECORD_SENT = """
UPDATE outbox SET sent_ids = sent_ids || %s::bigint, attempts = attempts + 1, error = NULL
WHERE update_id = %s AND kind = %s
"""
RECORD_ATTEMPT = """
UPDATE outbox SET attempts = attempts + 1, error = %s WHERE update_id = %s AND kind = %s
"""
CLOSE = """
UPDATE outbox SET status = %s, error = coalesce(%s, error),
    sent_at = CASE WHEN %s = 'sent' THEN now() ELSE sent_at END
WHERE update_id = %s AND kind = %s
"""
PENDING_COUNT = "SELECT count(*) AS n FROM outbox WHERE status = 'pending'"

KEEP_UPDATES = timedelta(days=2)
REPLY_KIND = "reply"  # the outbox row of a turn's reply (see ADD_REPLY)


@dataclass(frozen=True)
class Delivery:
    """Where a turn's reply goes: the update it answers and how to send it."""

    update_id: int
    chat_id: int
    thread_id: int | None = None
    reply_to: int | None = None
    fmt: str = "plain"

    def as_config(self) -> dict[str, Any]:
        """Return the delivery as plain values (it rides in the graph's config)."""
        return {
            "update_id": self.update_id,
            "chat_id": self.chat_id,
            "thread_id": self.thread_id,
            "reply_to": self.reply_to,
            "fmt": self.fmt,
        }

    @classmethod
    def from_config(cls, values: dict[str, Any]) -> Delivery:
        """Rebuild a delivery from `as_config`'s values."""
        return cls(**values)


@dataclass
class Reply:
    """An outbox row: a reply stored, and how much of it Telegram has accepted."""

    update_id: int
    chat_id: int
    thread_id: int | None
    reply_to: int | None
    text: str
    fmt: str
    status: str = "pending"
    sent_ids: list[int] = field(default_factory=list)
    attempts: int = 0
    kind: str = REPLY_KIND

    @classmethod
    def of(cls, row: dict[str, Any]) -> Reply:
        """Build a reply from its outbox row."""
        return cls(
            row["update_id"],
            row["chat_id"],
            row["thread_id"],
            row["reply_to"],
            row["text"],
            row["fmt"],
            row["status"],
            list(row["sent_ids"] or ()),
            row["attempts"],
            row["kind"],
        )


def _media_group(payload: dict[str, Any]) -> str | None:
    """Return the album (media group) an update's message belongs to, if any."""
    message = payload.get("message")
    group = message.get("media_group_id") if isinstance(message, dict) else None
    return str(group) if group is not None else None


class DeliveryRepository(Repository):
    """Inbox and outbox rows, keyed by Telegram's update_id."""

    async def store_updates(
        self, updates: list[tuple[int, int | None, dict[str, Any]]], queue: str, task: str
    ) -> list[int]:
        """Store (update_id, chat_id, payload) rows not seen before and defer their jobs.

        One transaction: a crash stores both the updates and their jobs, or neither (and
        then Telegram sends them again). Returns the update ids that were new.
        """
        if not updates:
            return []
        ids = [u[0] for u in updates]
        chats = [u[1] for u in updates]
        # json.dumps escapes every non-ASCII character: NUL and lone surrogates too.
        payloads = [json.dumps(u[2]) for u in updates]
        albums = [_media_group(u[2]) for u in updates]
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(STORE_UPDATES, (ids, chats, payloads, albums))
            new = sorted((r["update_id"], r["chat_id"]) for r in await cur.fetchall())
            if new:
                locks = [f"chat:{chat}" if chat is not None else None for _, chat in new]
                await conn.execute(DEFER_JOBS, (queue, task, [i for i, _ in new], locks))
        return [i for i, _ in new]

    async def inbox_row(self, update_id: int) -> dict[str, Any] | None:
        """Return the stored update (its `payload` decoded), or None."""
        async with self._conn() as conn:
            row = await (await conn.execute(INBOX_ROW, (update_id,))).fetchone()
        if row is not None:
            row["payload"] = json.loads(row["payload"])
        return row

    async def stored_message_id(self, update_id: int, conn: Conn | None = None) -> int | None:
        """Return the id of the user's message the update stored, or None."""
        async with self._conn(conn) as c:
            row = await (await c.execute(MESSAGE_ID, (update_id,))).fetchone()
        return row["message_id"] if row else None

    async def record_message(self, update_id: int, message_id: int, conn: Conn) -> None:
        """Remember which stored user message the update became (in its transaction)."""
        await conn.execute(RECORD_MESSAGE, (message_id, update_id))

    async def album(
        self, chat_id: int, media_group_id: str, update_id: int
    ) -> list[tuple[int, dict[str, Any], float]]:
        """Return the album's other unanswered updates: (update_id, payload, seconds since
        it arrived), in order."""
        async with self._conn() as conn:
            cur = await conn.execute(ALBUM, (chat_id, media_group_id, update_id))
            rows = await cur.fetchall()
        return [(r["update_id"], json.loads(r["payload"]), float(r["age"])) for r in rows]

    async def consume(self, update_ids: list[int], message_id: int, conn: Conn) -> None:
        """Mark an album's other updates answered by the stored message (its transaction)."""
        if update_ids:
            await conn.execute(CONSUME, (message_id, update_ids))

    async def finish(self, update_id: int) -> None:
        """Mark the update processed."""
        async with self._conn() as conn:
            await conn.execute(FINISH, (update_id,))

    async def prune(self, keep: timedelta = KEEP_UPDATES) -> int:
        """Delete processed updates, erased updates' ids and closed replies older than
        `keep`; return the replies deleted."""
        async with self._conn() as conn:
            return (await conn.execute(PRUNE, (keep, keep, keep))).rowcount

    async def add_reply(
        self, delivery: Delivery, text: str, conn: Conn | None = None, kind: str = REPLY_KIND
    ) -> None:
        """Store the reply to the update (or, by `kind`, a message beside it), unless one
        is stored already."""
        params = (
            delivery.update_id,
            delivery.chat_id,
            delivery.thread_id,
            delivery.reply_to,
            clean_text(text),
            delivery.fmt,
            kind,
        )
        async with self._conn(conn) as c:
            await c.execute(ADD_REPLY, params)

    async def reply(self, update_id: int, kind: str = REPLY_KIND) -> Reply | None:
        """Return the stored reply to the update (or its message of `kind`), or None."""
        async with self._conn() as conn:
            row = await (await conn.execute(REPLY, (update_id, kind))).fetchone()
        return Reply.of(row) if row else None

    async def record_sent(self, update_id: int, message_id: int, kind: str = REPLY_KIND) -> None:
        """Record that Telegram accepted one more part of the reply."""
        async with self._conn() as conn:
            await conn.execute(RECORD_SENT, (message_id, update_id, kind))

    async def record_attempt(self, update_id: int, error: str, kind: str = REPLY_KIND) -> None:
        """Record a failed attempt to send the reply."""
        async with self._conn() as conn:
            await conn.execute(RECORD_ATTEMPT, (error[:500], update_id, kind))

    async def close(
        self, update_id: int, status: str, error: str | None = None, kind: str = REPLY_KIND
    ) -> None:
        """Mark the reply sent, or finally refused (`blocked`, `rejected`, `failed`)."""
        params = (status, error and error[:500], status, update_id, kind)
        async with self._conn() as conn:
            await conn.execute(CLOSE, params)

    async def pending_replies(self) -> int:
        """Return how many replies wait to be sent."""
        async with self._conn() as conn:
            row = await (await conn.execute(PENDING_COUNT)).fetchone()
        return int(row["n"]) if row else 0
