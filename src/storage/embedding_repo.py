"""Message embeddings: what is waiting for one, storing them, and one owner's vectors.

A vector is stored as little-endian float16 bytes (sql/0008_embeddings.sql); this module
turns them back into a float32 matrix for ranking in process. Reads name the owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from src.storage.base import Conn, Repository

# Searchable messages without an embedding, oldest first, any owner.
SELECT_PENDING = """
SELECT id, owner_id, search_text(content) AS text FROM messages
WHERE NOT embedded AND search_vector IS NOT NULL
ORDER BY id LIMIT %s
"""
UPSERT_EMBEDDING = """
INSERT INTO message_embeddings (message_id, owner_id, model, vector) VALUES (%s, %s, %s, %s)
ON CONFLICT (message_id) DO UPDATE SET
    model = EXCLUDED.model, vector = EXCLUDED.vector, created_at = now()
"""
MARK_EMBEDDED = "UPDATE messages SET embedded = true WHERE id = ANY(%s)"
# After EMBEDDING_MODEL changed: give a batch of other models' vectors back to the queue.
REQUEUE_OTHER_MODELS = """
UPDATE messages SET embedded = false WHERE id IN (
    SELECT e.message_id FROM message_embeddings e JOIN messages m ON m.id = e.message_id
    WHERE e.model <> %s AND m.embedded LIMIT %s
)
"""
COUNTS = """
SELECT (SELECT count(*) FROM messages WHERE NOT embedded AND search_vector IS NOT NULL)
           AS pending,
       (SELECT count(*) FROM message_embeddings WHERE model = %s) AS embedded,
       (SELECT count(*) FROM message_embeddings WHERE model <> %s) AS other_models
"""
# One owner's newest `scan` vectors of the model, with the search's filters. One row
# comes back, the ids in one array and the vectors concatenated, so the transfer is two
# values however many vectors there are. Both aggregates read the rows in one order.
OWNER_VECTORS = """
SELECT array_agg(v.id) AS ids, string_agg(v.vector, ''::bytea) AS vectors FROM (
    SELECT e.message_id AS id, e.vector FROM message_embeddings e
    WHERE e.owner_id = %(user)s AND e.model = %(model)s
    ORDER BY e.message_id DESC LIMIT %(scan)s
) v JOIN messages m ON m.id = v.id
WHERE m.owner_id = %(user)s AND m.role = ANY(%(roles)s) AND m.id <> %(exclude)s
  AND (%(since)s::timestamptz IS NULL OR m.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR m.created_at < %(until)s::timestamptz)
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
class VectorFilter:
    """Which of an owner's messages a semantic search may return."""

    roles: list[str]
    exclude_id: int = 0
    since: datetime | None = None
    until: datetime | None = None


class EmbeddingRepository(Repository):
    """Embeddings of messages: the queue, the vectors, and one owner's matrix."""

    async def pending(self, limit: int, conn: Conn | None = None) -> list[Pending]:
        """Return up to `limit` messages without an embedding, oldest first."""
        async with self._conn(conn) as c:
            rows = await (await c.execute(SELECT_PENDING, (limit,))).fetchall()
        return [Pending(r["id"], r["owner_id"], r["text"] or "") for r in rows]

    async def store(
        self, model: str, items: list[Pending], vectors: np.ndarray, conn: Conn | None = None
    ) -> None:
        """Store the vectors of `items` made by `model` and mark them embedded, at once."""
        params = [
            (p.id, p.owner_id, model, to_bytes(v)) for p, v in zip(items, vectors, strict=True)
        ]
        async with self._conn(conn) as c, c.transaction():
            async with c.cursor() as cur:
                await cur.executemany(UPSERT_EMBEDDING, params)
            await c.execute(MARK_EMBEDDED, ([p.id for p in items],))

    async def requeue_other_models(self, model: str, limit: int, conn: Conn | None = None) -> int:
        """Queue up to `limit` messages embedded by another model again; return how many."""
        async with self._conn(conn) as c:
            return (await c.execute(REQUEUE_OTHER_MODELS, (model, limit))).rowcount

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
        owner's newest `scan` vectors of `model` that pass `where`."""
        params: dict[str, Any] = {
            "user": owner_id,
            "model": model,
            "scan": scan,
            "roles": where.roles,
            "exclude": where.exclude_id,
            "since": where.since,
            "until": where.until,
        }
        async with self._conn(conn) as c:
            cur = c.cursor(binary=True)
            await cur.execute(OWNER_VECTORS, params)
            row = await cur.fetchone()
        ids = list(row["ids"] or []) if row else []
        blob = bytes(row["vectors"]) if row and row["vectors"] is not None else b""
        return ids, from_bytes(blob, len(ids))
