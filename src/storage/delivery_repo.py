"""The inbox (updates stored before they are acknowledged) and the outbox (replies stored
before they are sent), with the job queue's deferral in the inbox's transaction."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from src.storage.base import Conn, Repository, clean_text

logger = logging.getLogger(__name__)

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
# A chat that sends an update can be reached again (see sql/0035_unreachable.sql): the
# chats named come back, then (a statement of its own, so that it sees a reply held by
# a transaction the first waited for) their held replies are pending again and their
# runs' inbox rows open, each to be deferred as a job of its chat.
REACHABLE = """
UPDATE users SET unreachable_since = NULL
WHERE telegram_user_id = ANY(%s::bigint[]) AND unreachable_since IS NOT NULL
RETURNING telegram_user_id
"""
RELEASE_HELD = """
WITH released AS (
    UPDATE outbox SET status = 'pending'
    WHERE status = 'held' AND chat_id = ANY(%s::bigint[])
    RETURNING update_id, chat_id, created_at
), reopened AS (
    UPDATE inbox SET done_at = NULL WHERE update_id IN (SELECT update_id FROM released)
)
SELECT update_id, chat_id FROM released ORDER BY created_at, update_id
"""
# Whether the chat is unreachable, its row locked against the update that clears it
# until the reply set aside below is committed (RELEASE_HELD then finds it).
REACH = "SELECT unreachable_since FROM users WHERE telegram_user_id = %s FOR SHARE"
# A reply kept for later (`held`: headed, once, with why it comes late) or given up
# (`blocked`) while its chat cannot be reached.
SET_ASIDE = """
UPDATE outbox SET status = %s,
    text = CASE WHEN %s = 'held' AND held_since IS NULL AND cardinality(sent_ids) = 0
                THEN %s || text ELSE text END,
    held_since = CASE WHEN %s = 'held' THEN coalesce(held_since, now()) ELSE held_since END
WHERE update_id = %s AND kind = %s AND status IN ('pending', 'blocked')
"""
REOPEN = (
    "UPDATE outbox SET status = 'pending' WHERE update_id = %s AND kind = %s AND status = 'blocked'"
)
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
# unacknowledged update for 24 hours, so two days is safely past any redelivery. A held
# reply, and the inbox row it is sent from, wait for their chat however long it takes.
PRUNE = """
WITH gone AS (
    DELETE FROM inbox WHERE done_at < now() - %s
    AND NOT EXISTS (
        SELECT 1 FROM outbox o WHERE o.update_id = inbox.update_id AND o.status = 'held'
    )
),
erased AS (DELETE FROM inbox_erased WHERE erased_at < now() - %s)
DELETE FROM outbox WHERE status NOT IN ('pending', 'held') AND created_at < now() - %s
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
        self,
        updates: list[tuple[int, int | None, dict[str, Any]]],
        queue: str,
        task: str,
        present: Sequence[int] = (),
    ) -> list[int]:
        """Store (update_id, chat_id, payload) rows not seen before and defer their jobs.

        `present`: the chats the updates came from, stored or not (an update from a chat
        is the sign it can be reached again): those marked unreachable are cleared, and
        their held replies are sent again, before the new updates' jobs.

        One transaction: a crash stores both the updates and their jobs, or neither (and
        then Telegram sends them again). Returns the update ids that were new.
        """
        if not updates and not present:
            return []
        ids = [u[0] for u in updates]
        chats = [u[1] for u in updates]
        # json.dumps escapes every non-ASCII character: NUL and lone surrogates too.
        payloads = [json.dumps(u[2]) for u in updates]
        albums = [_media_group(u[2]) for u in updates]
        async with self.pool.connection() as conn, conn.transaction():
            new: list[tuple[int, int]] = []
            if updates:
                cur = await conn.execute(STORE_UPDATES, (ids, chats, payloads, albums))
                new = sorted((r["update_id"], r["chat_id"]) for r in await cur.fetchall())
            if present:
                await self._reachable(conn, sorted(set(present)), queue, task)
            if new:
                locks = [f"chat:{chat}" if chat is not None else None for _, chat in new]
                await conn.execute(DEFER_JOBS, (queue, task, [i for i, _ in new], locks))
        return [i for i, _ in new]

    @staticmethod
    async def _reachable(conn: Conn, chats: list[int], queue: str, task: str) -> None:
        """Clear the unreachable mark of `chats`, and defer the jobs that send the
        replies held for them (in the caller's transaction)."""
        rows = await (await conn.execute(REACHABLE, (chats,))).fetchall()
        back = [r["telegram_user_id"] for r in rows]
        if not back:
            return
        held = await (await conn.execute(RELEASE_HELD, (back,))).fetchall()
        logger.info("chats %s write again: %d held replies go out", back, len(held))
        if held:
            locks = [f"chat:{r['chat_id']}" for r in held]
            await conn.execute(DEFER_JOBS, (queue, task, [r["update_id"] for r in held], locks))

    async def set_aside(self, reply: Reply, status: str, header: str = "") -> bool:
        """While the reply's chat is marked unreachable, keep the reply for later
        (`held`, its text headed once with `header`) or give it up (`blocked`) instead of
        sending it. Return whether it was set aside (False: the chat is reachable)."""
        async with self.pool.connection() as conn, conn.transaction():
            row = await (await conn.execute(REACH, (reply.chat_id,))).fetchone()
            if row is None or row["unreachable_since"] is None:
                return False
            params = (status, status, header, status, reply.update_id, reply.kind)
            await conn.execute(SET_ASIDE, params)
        reply.status = status
        return True

    async def reopen(self, reply: Reply) -> None:
        """Make a reply Telegram refused (`blocked`) pending again, to be sent again."""
        async with self._conn() as conn:
            await conn.execute(REOPEN, (reply.update_id, reply.kind))
        reply.status = "pending"

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
        """Mark the reply sent, or finally refused (`blocked`, `rejected`, `failed`); a
        reply held for an unreachable chat is `set_aside`."""
        params = (status, error and error[:500], status, update_id, kind)
        async with self._conn() as conn:
            await conn.execute(CLOSE, params)

    async def pending_replies(self) -> int:
        """Return how many replies wait to be sent."""
        async with self._conn() as conn:
            row = await (await conn.execute(PENDING_COUNT)).fetchone()
        return int(row["n"]) if row else 0
