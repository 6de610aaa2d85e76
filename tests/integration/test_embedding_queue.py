"""The embedding queue: fair per owner, a refused message set aside, deletions mid-batch,
and no per-turn query that scans every stored vector.

Embeddings come from the local OpenAI-compatible fake through the real `OpenAIEmbeddings`
client (EMBEDDING_PROVIDER=openai); the fake refuses an input over its context with 400,
as OpenAI does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from psycopg_pool import AsyncConnectionPool

from src.services.embedding_worker import EmbeddingWorker
from src.storage.conversation_repo import ConversationRepository
from src.storage.embedding_repo import EmbeddingRepository
from tests.fakes.openai_server import FakeOpenAI

Pool = AsyncConnectionPool[Any]
EMBED = {"embedding_provider": "openai", "embedding_model": "fake-embed"}
ANNA, BORIS = 7601, 7602
VECTORS = "message_embeddings"


async def seed(pool: Pool, owner: int, *texts: str) -> list[int]:
    """Store user messages for `owner`; return their ids."""
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(owner)
    return [(await repo.append_message(conv, "user", t))["id"] for t in texts]


async def embedded_ids(pool: Pool) -> set[int]:
    """Return the ids of the messages that have a vector."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT message_id FROM message_embeddings")
        return {r["message_id"] for r in await cur.fetchall()}


async def pending_count(pool: Pool) -> int:
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT count(*) AS n FROM messages "
                "WHERE NOT embedded AND search_vector IS NOT NULL"
            )
        ).fetchone()
    return int(row["n"]) if row else -1


async def wait_for(condition: Any, tries: int = 200) -> None:
    """Poll an async condition until it holds (at most about 10 s)."""
    for _ in range(tries):
        if await condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition never held")


async def test_an_active_owners_new_message_does_not_wait_behind_a_backlog(
    runtime_factory: Any, pool: Pool
) -> None:
    rt = await runtime_factory(**EMBED)
    await seed(pool, ANNA, *[f"old note {n}" for n in range(60)])
    (fresh,) = await seed(pool, BORIS, "my new message")
    worker = EmbeddingWorker(EmbeddingRepository(pool), rt.deps.embedder, batch=8)
    assert await worker.run_once() == 8
    stored = await embedded_ids(pool)
    assert fresh in stored  # in the first batch, beside Anna's newest
    assert len(stored) == 8


async def test_a_lone_refused_message_is_set_aside(
    runtime_factory: Any, llm: FakeOpenAI, pool: Pool
) -> None:
    llm.embedding_max_tokens = 3
    rt = await runtime_factory(**EMBED)
    await seed(pool, ANNA, "one message too long to embed")
    rt.embeddings.kick()
    await rt.embeddings.drain()
    assert rt.embeddings.failures == 0 and rt.embeddings.refused == 1
    assert await pending_count(pool) == 0


async def test_a_refused_message_does_not_stall_another_owner(
    runtime_factory: Any, llm: FakeOpenAI, pool: Pool
) -> None:
    llm.embedding_max_tokens = 6
    rt = await runtime_factory(**EMBED)
    short, poison = await seed(
        pool, ANNA, "short note", "a message far too long for this model to read at all"
    )
    (other,) = await seed(pool, BORIS, "boris writes")
    rt.embeddings.kick()
    await rt.embeddings.drain()
    assert rt.embeddings.failures == 0
    assert await embedded_ids(pool) == {short, other}
    assert await pending_count(pool) == 0  # the refused one is marked, not retried
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT message_id, model FROM embedding_failures")
        assert [(r["message_id"], r["model"]) for r in await cur.fetchall()] == [
            (poison, "openai:fake-embed")
        ]
    # The queue goes on: a later message is embedded, the refused one is not sent again.
    (later,) = await seed(pool, ANNA, "later note")
    requests = len(llm.embedding_requests)
    rt.embeddings.kick()
    await rt.embeddings.drain()
    assert later in await embedded_ids(pool)
    assert [r["input"] for r in llm.embedding_requests[requests:]] == [["later note"]]


async def test_a_provider_refusing_everything_is_a_failure_not_a_poison(
    runtime_factory: Any, llm: FakeOpenAI, pool: Pool
) -> None:
    llm.embedding_max_tokens = 0  # refuses every input: a wrong option, say
    rt = await runtime_factory(**EMBED)
    await seed(pool, ANNA, "two words", "three more words")
    rt.embeddings.kick()
    await rt.embeddings.drain()
    assert rt.embeddings.failures == 1 and rt.embeddings.refused == 0
    assert await pending_count(pool) == 2


async def test_a_message_deleted_mid_batch_does_not_stall(
    runtime_factory: Any, llm: FakeOpenAI, pool: Pool
) -> None:
    rt = await runtime_factory(**EMBED)
    gone, kept = await seed(pool, ANNA, "about to go", "staying here")
    llm.delay_embeddings_next(1, 1.0)
    rt.embeddings.kick()
    await wait_for(lambda: asyncio.sleep(0, bool(llm.embedding_requests)))
    async with pool.connection() as conn:  # as /new deletes it, while the batch is out
        await conn.execute("DELETE FROM messages WHERE id = %s", (gone,))
    await rt.embeddings.drain()
    assert rt.embeddings.failures == 0
    assert await embedded_ids(pool) == {kept}
    (later,) = await seed(pool, ANNA, "the next one")
    rt.embeddings.kick()
    await rt.embeddings.drain()
    assert await embedded_ids(pool) == {kept, later}


class RecordingPool:
    """A pool whose connections record every statement executed on them."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.statements: list[tuple[str, Any]] = []

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        async with self.pool.connection() as conn:
            yield Recording(conn, self.statements)


class Recording:
    """A connection that records what it executes."""

    def __init__(self, conn: Any, into: list[tuple[str, Any]]) -> None:
        self.conn = conn
        self.into = into

    async def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
        self.into.append((query, params))
        return await self.conn.execute(query, params, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)  # transactions and cursors, as they are


def full_scans(plan: dict[str, Any]) -> list[str]:
    """Return the plan's whole-table reads: a sequential scan of messages or of the
    vectors, or a walk through a whole index of the vectors (no index condition)."""
    found = []
    node_type = plan.get("Node Type", "")
    relation = plan.get("Relation Name")
    index = plan.get("Index Name", "")
    if node_type == "Seq Scan" and relation in ("messages", VECTORS):
        found.append(f"Seq Scan on {relation}")
    if index.startswith(VECTORS) and "Index Cond" not in plan:
        found.append(f"{node_type} on {index}")
    for child in plan.get("Plans", []):
        found += full_scans(child)
    return found


async def test_no_turn_scans_every_stored_vector(
    runtime_factory: Any, llm: FakeOpenAI, pool: Pool
) -> None:
    rt = await runtime_factory(**EMBED)
    await seed(pool, ANNA, *[f"note {n}" for n in range(40)])
    await seed(pool, BORIS, "hello")
    recording = RecordingPool(pool)
    worker = EmbeddingWorker(EmbeddingRepository(recording), rt.deps.embedder)
    while await worker.run_once():  # the first start: the model is compared once
        pass
    # A turn: a new message, the worker kicked until the queue is empty again.
    recording.statements.clear()
    await seed(pool, ANNA, "a turn's message")
    while await worker.run_once():
        pass
    assert recording.statements
    async with pool.connection() as conn:
        await conn.execute("SET enable_seqscan = off")  # a scan no index can serve shows
        for query, params in recording.statements:
            cur = await conn.execute("EXPLAIN (FORMAT JSON) " + query, params)
            row = await cur.fetchone()
            plan = row["QUERY PLAN"] if row else []
            plan = json.loads(plan) if isinstance(plan, str) else plan
            assert full_scans(plan[0]["Plan"]) == [], query
        await conn.execute("RESET enable_seqscan")
