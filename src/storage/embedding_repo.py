"""Message embeddings: what is waiting for one, storing them, and one owner's vectors.

A vector is stored as little-endian float16 bytes (sql/0008_embeddings.sql); this module
turns them back into a float32 matrix for ranking in process. Reads name the owner.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from src.storage.base import Conn, Repository

# The queue (the users' searchable messages without a vector, sql/0020), fair per
# owner: owners with pending messages, in owner order from a cursor
# (a skip through messages_embed_owner_pending_idx, one probe an owner, however long
# anyone's backlog), then each one's newest pending messages. An active owner's new
# message waits for one round of owners, never behind another owner's backlog.
PENDING_OWNERS = """
WITH RECURSIVE owners AS (
    (SELECT owner_id FROM messages
     WHERE NOT embedded AND search_vector IS NOT NULL AND role = 'user'
       AND owner_id > %(after)s
     ORDER BY owner_id LIMIT 1)
    UNION ALL
    SELECT (SELECT m.owner_id FROM messages m
            WHERE NOT m.embedded AND m.search_vector IS NOT NULL AND m.role = 'user'
              AND m.owner_id > o.owner_id
            ORDER BY m.owner_id LIMIT 1)
    FROM owners o WHERE o.owner_id IS NOT NULL
)
SELECT owner_id FROM owners WHERE owner_id IS NOT NULL LIMIT %(owners)s
"""
# Up to `limit` of them: the owners' newest first, then their second newest, and so on.
PENDING_OF = """
SELECT p.id, p.owner_id, search_text(p.content) AS text
FROM unnest(%(owners)s::bigint[]) WITH ORDINALITY AS o(owner_id, n),
LATERAL (
    SELECT m.id, m.owner_id, m.content, row_number() OVER (ORDER BY m.id DESC) AS turn
    FROM messages m
    WHERE m.owner_id = o.owner_id
      AND NOT m.embedded AND m.search_vector IS NOT NULL AND m.role = 'user'
    ORDER BY m.id DESC LIMIT %(limit)s
) p
ORDER BY p.turn, o.n LIMIT %(limit)s
"""
# The vectors of the messages still there, marked embedded at once. The messages are
# locked first (FOR KEY SHARE): one deleted meanwhile (/new, /forget) is skipped, and
# one being deleted waits for this to commit and takes its vector with it. A vector for a
# deleted message raised a foreign-key error that stalled the whole queue.
STORE = """
WITH live AS (
    SELECT id, owner_id FROM messages WHERE id = ANY(%(ids)s) FOR KEY SHARE
), stored AS (
    INSERT INTO message_embeddings (message_id, owner_id, model, vector)
    SELECT l.id, l.owner_id, %(model)s, v.vector
    FROM unnest(%(ids)s::bigint[], %(vectors)s::bytea[]) AS v(id, vector)
    JOIN live l ON l.id = v.id
    ON CONFLICT (message_id) DO UPDATE SET
        model = EXCLUDED.model, vector = EXCLUDED.vector, created_at = now()
)
UPDATE messages SET embedded = true WHERE id IN (SELECT id FROM live)
"""
# A message the provider refused: marked, and out of the queue.
QUARANTINE = """
WITH live AS (
    SELECT id FROM messages WHERE id = ANY(%(ids)s) FOR KEY SHARE
), failed AS (
    INSERT INTO embedding_failures (message_id, model, error)
    SELECT id, %(model)s, %(error)s FROM live
    ON CONFLICT (message_id) DO UPDATE SET
        model = EXCLUDED.model, error = EXCLUDED.error, created_at = now()
)
UPDATE messages SET embedded = true WHERE id IN (SELECT id FROM live)
"""
# The configured model, compared once when a worker starts: a change (or a first start)
# asks for other models' vectors to be queued again, until none is left.
ADOPT_MODEL = """
INSERT INTO embedding_state AS s (model, requeue) VALUES (%(model)s, true)
ON CONFLICT (id) DO UPDATE SET model = EXCLUDED.model, requeue = true
    WHERE s.model <> EXCLUDED.model
"""
REQUEUE_WANTED = "SELECT requeue FROM embedding_state WHERE model = %s"
REQUEUE_DONE = "UPDATE embedding_state SET requeue = false WHERE model = %s"
# After EMBEDDING_MODEL changed: give a batch of other models' vectors (and refusals)
# back to the queue. No index serves `model <>`: it runs only after a change.
REQUEUE_OTHER_MODELS = """
UPDATE messages SET embedded = false WHERE id IN (
    SELECT e.message_id FROM message_embeddings e JOIN messages m ON m.id = e.message_id
    WHERE e.model <> %(model)s AND m.embedded AND m.role = 'user' LIMIT %(limit)s
)
"""
REQUEUE_REFUSED = """
WITH refused AS (
    DELETE FROM embedding_failures WHERE message_id IN (
        SELECT message_id FROM embedding_failures WHERE model <> %(model)s LIMIT %(limit)s
    ) RETURNING message_id
)
UPDATE messages SET embedded = false WHERE id IN (SELECT message_id FROM refused)
"""
COUNTS = """
SELECT (SELECT count(*) FROM messages
        WHERE NOT embedded AND search_vector IS NOT NULL AND role = 'user') AS pending,
       (SELECT count(*) FROM message_embeddings WHERE model = %s) AS embedded,
       (SELECT count(*) FROM message_embeddings WHERE model <> %s) AS other_models,
       (SELECT count(*) FROM embedding_failures) AS refused
"""
# One owner's newest `scan` message ids with a vector of the model, newest first: an
# index-only scan, what a cached matrix is checked against before each search.
OWNER_IDS = """
SELECT array_agg(v.message_id) AS ids FROM (
    SELECT e.message_id FROM message_embeddings e
    WHERE e.owner_id = %(user)s AND e.model = %(model)s
    ORDER BY e.message_id DESC LIMIT %(scan)s
) v
"""
# Some of the owner's vectors of the model, with what a search filters on. One row comes
# back, each column an array (the vectors concatenated), so the transfer is a few values
# however many vectors there are; the aggregates read the rows in one order.
VECTORS_BY_ID = """
SELECT array_agg(e.message_id) AS ids, array_agg(m.role = 'user') AS by_user,
       array_agg(m.created_at) AS created, string_agg(e.vector, ''::bytea) AS vectors
FROM message_embeddings e JOIN messages m ON m.id = e.message_id
WHERE e.message_id = ANY(%(ids)s) AND e.owner_id = %(user)s AND e.model = %(model)s
  AND m.owner_id = %(user)s
"""
VECTOR_DTYPE = np.dtype("<f2")


def to_bytes(vector: np.ndarray) -> bytes:
    """Return a unit vector as stored: little-endian float16."""
    return np.asarray(vector, dtype=VECTOR_DTYPE).tobytes()


def from_bytes(blob: bytes, count: int) -> np.ndarray:
    """Return `count` stored vectors, concatenated in `blob`, as a float32 matrix."""
    if count == 0:
        return np.zeros((0, 0), dtype=np.float32)
    return np.frombuffer(blob, dtype=VECTOR_DTYPE).reshape(count, -1).astype(np.float32)


@dataclass(frozen=True)
class Pending:
    """A message waiting for its embedding."""

    id: int
    owner_id: int
    text: str


@dataclass(frozen=True)
class OwnerMatrix:
    """An owner's vectors of one model with what a search filters on, one row each."""

    ids: np.ndarray
    """Message ids (int64)."""
    by_user: np.ndarray
    """True where the message is the user's, False where it is the assistant's."""
    created: np.ndarray
    """When each message was stored, as POSIX seconds (float64)."""
    matrix: np.ndarray
    """The vectors, float32, shape (len(ids), dims)."""

    @classmethod
    def empty(cls) -> OwnerMatrix:
        return cls(
            np.zeros(0, np.int64),
            np.zeros(0, bool),
            np.zeros(0, np.float64),
            np.zeros((0, 0), np.float32),
        )

    def keep(self, mask: np.ndarray) -> OwnerMatrix:
        """Return the rows where `mask` holds."""
        m = mask
        return OwnerMatrix(self.ids[m], self.by_user[m], self.created[m], self.matrix[m])

    def plus(self, other: OwnerMatrix) -> OwnerMatrix:
        """Return these rows and `other`'s."""
        if not len(other.ids):
            return self
        if not len(self.ids):
            return other
        return OwnerMatrix(
            np.concatenate([self.ids, other.ids]),
            np.concatenate([self.by_user, other.by_user]),
            np.concatenate([self.created, other.created]),
            np.concatenate([self.matrix, other.matrix]),
        )

    def passing(self, where: VectorFilter) -> tuple[list[int], np.ndarray]:
        """Return the ids and vectors of the rows `where` lets through."""
        mask = np.ones(len(self.ids), dtype=bool)
        if set(where.roles) != {"user", "assistant"}:
            mask &= self.by_user if "user" in where.roles else ~self.by_user
        if where.exclude_id:
            mask &= self.ids != where.exclude_id
        if where.since is not None:
            mask &= self.created >= where.since.timestamp()
        if where.until is not None:
            mask &= self.created < where.until.timestamp()
        if mask.all():
            return self.ids.tolist(), self.matrix
        return self.ids[mask].tolist(), self.matrix[mask]


@dataclass(frozen=True)
class VectorFilter:
    """Which of an owner's messages a semantic search may return."""

    roles: list[str]
    exclude_id: int = 0
    since: datetime | None = None
    until: datetime | None = None


# Owners whose vectors a repository keeps in memory between searches: 5,000 vectors of
# 384 float32 dimensions are 7.7 MB an owner, so about 60 MB at most.
OWNER_CACHE = 8


class EmbeddingRepository(Repository):
    """Embeddings of messages: the queue, the vectors, and one owner's matrix."""

    def __init__(self, pool: Any) -> None:
        super().__init__(pool)
        self._owners: OrderedDict[tuple[int, str], OwnerMatrix] = OrderedDict()

    async def pending_owners(self, after: int, limit: int, conn: Conn | None = None) -> list[int]:
        """Return up to `limit` owners with pending messages, the first after `after`."""
        async with self._conn(conn) as c:
            cur = await c.execute(PENDING_OWNERS, {"after": after, "owners": limit})
            return [r["owner_id"] for r in await cur.fetchall()]

    async def pending(
        self, owners: list[int], limit: int, conn: Conn | None = None
    ) -> list[Pending]:
        """Return up to `limit` pending messages of `owners`, taking turns: each one's
        newest, then each one's second newest..."""
        async with self._conn(conn) as c:
            cur = await c.execute(PENDING_OF, {"owners": owners, "limit": limit})
            rows = await cur.fetchall()
        return [Pending(r["id"], r["owner_id"], r["text"] or "") for r in rows]

    async def store(
        self, model: str, items: list[Pending], vectors: np.ndarray, conn: Conn | None = None
    ) -> None:
        """Store the vectors of `items` made by `model` and mark them embedded, at once;
        a message deleted meanwhile is skipped."""
        params = {
            "model": model,
            "ids": [p.id for p in items],
            "vectors": [to_bytes(v) for v in vectors],
        }
        async with self._conn(conn) as c:
            await c.execute(STORE, params)

    async def quarantine(
        self, model: str, items: list[Pending], error: str, conn: Conn | None = None
    ) -> None:
        """Mark `items` as refused by `model`'s provider: out of the queue."""
        params = {"model": model, "ids": [p.id for p in items], "error": error}
        async with self._conn(conn) as c:
            await c.execute(QUARANTINE, params)

    async def adopt_model(self, model: str, conn: Conn | None = None) -> bool:
        """Record `model` as the one vectors are made by; return True while vectors of
        another model may still be stored (after a change, or on a first start)."""
        async with self._conn(conn) as c:
            await c.execute(ADOPT_MODEL, {"model": model})
            row = await (await c.execute(REQUEUE_WANTED, (model,))).fetchone()
        return bool(row and row["requeue"])

    async def requeue_other_models(self, model: str, limit: int, conn: Conn | None = None) -> int:
        """Queue up to `limit` messages embedded (or refused) under another model again;
        return how many, and when none is left, record that the change is done."""
        async with self._conn(conn) as c:
            count = (
                await c.execute(REQUEUE_OTHER_MODELS, {"model": model, "limit": limit})
            ).rowcount
            if count == 0:
                await c.execute(REQUEUE_DONE, (model,))
        return count

    async def counts(self, model: str, conn: Conn | None = None) -> dict[str, int]:
        """Return how many messages wait, have `model`'s vector, have another model's."""
        async with self._conn(conn) as c:
            row = await (await c.execute(COUNTS, (model, model))).fetchone()
        return {k: int(v) for k, v in (row or {}).items()}

    async def owner_vectors(
        self,
        owner_id: int,
        model: str,
        scan: int,
        where: VectorFilter,
        conn: Conn | None = None,
    ) -> tuple[list[int], np.ndarray]:
        """Return message ids and their vectors (a float32 matrix, one row each): the
        owner's newest `scan` vectors of `model` that pass `where`.

        The owner's matrix is kept in memory between searches (OWNER_CACHE owners, the
        most recent): each search reads the newest ids from the index and fetches only
        the vectors it does not hold yet, and drops the ones that are gone, so what it
        returns is exactly what is stored, as a fresh read would."""
        key = (owner_id, model)
        params: dict[str, Any] = {"user": owner_id, "model": model, "scan": scan}
        async with self._conn(conn) as c:
            row = await (await c.execute(OWNER_IDS, params)).fetchone()
            newest = np.asarray((row and row["ids"]) or [], dtype=np.int64)
            held = self._owners.get(key) or OwnerMatrix.empty()
            held = held.keep(np.isin(held.ids, newest))
            missing = newest[~np.isin(newest, held.ids)]
            if len(missing):
                held = held.plus(await self._fetch(c, params, missing))
        self._owners[key] = held
        self._owners.move_to_end(key)
        while len(self._owners) > OWNER_CACHE:
            self._owners.popitem(last=False)
        return held.passing(where)

    async def _fetch(self, c: Conn, params: dict[str, Any], ids: np.ndarray) -> OwnerMatrix:
        cur = c.cursor(binary=True)
        await cur.execute(VECTORS_BY_ID, {**params, "ids": ids.tolist()})
        row = await cur.fetchone()
        if not row or not row["ids"]:
            return OwnerMatrix.empty()
        found = np.asarray(row["ids"], dtype=np.int64)
        return OwnerMatrix(
            found,
            np.asarray(row["by_user"], dtype=bool),
            np.asarray([t.timestamp() for t in row["created"]], dtype=np.float64),
            from_bytes(bytes(row["vectors"]), len(found)),
        )
