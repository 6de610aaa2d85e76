"""Semantic search: embeddings made in the background, fused with lexical search.

The embedding endpoint is the local OpenAI-compatible fake, reached through the real
`OpenAIEmbeddings` client (EMBEDDING_PROVIDER=openai); its vectors are a bag of 5-letter
stems with declared synonyms, so a test knows which texts are near.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from src.graph.tools import make_memory_tools
from src.services.agent_service import Identity
from src.storage.conversation_repo import ConversationRepository
from src.storage.embedding_repo import EmbeddingRepository, Pending
from src.storage.search_ranking import LONG_QUERY_WORDS, SemanticQuery, cosine_ranking, fuse
from src.storage.search_repo import SearchRepository, StopWordsOnly
from tests.fakes.openai_server import FakeOpenAI

Pool = AsyncConnectionPool[Any]
ANNA = Identity(7301, "anna", "Anna", "en")
OWNER_BLOCKS = itertools.count(7_400_000, 10)
EMBED = {"embedding_provider": "openai", "embedding_model": "fake-embed"}
REPO_ROOT = Path(__file__).resolve().parents[2]


async def vectors_of(pool: Pool, owner: int) -> dict[str, str]:
    """Return the owner's embedded message texts and the model of each vector."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT m.content, e.model FROM message_embeddings e "
            "JOIN messages m ON m.id = e.message_id WHERE e.owner_id = %s",
            (owner,),
        )
        return {r["content"]: r["model"] for r in await cur.fetchall()}


async def wait_for(condition: Any, tries: int = 200) -> None:
    """Poll an async condition until it holds (at most about 10 s)."""
    for _ in range(tries):
        if await condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition never held")


async def settle(rt: Any) -> None:
    """Wait for the turns' background work, then for the embeddings it asked for."""
    await rt.service.drain()
    await rt.embeddings.drain()


async def search_tool(rt: Any, owner: int, query: str) -> str:
    """Run the search_history tool as the graph does, for `owner`."""
    tool = {t.name: t for t in make_memory_tools(rt.deps)}["search_history"]
    call = {"name": "search_history", "args": {"query": query}, "id": "c1", "type": "tool_call"}
    message = await tool.ainvoke({**call, "args": {**call["args"], "state": {"user_id": owner}}})
    return str(message.content)


async def test_embeddings_are_made_after_the_turn_never_inside_it(
    runtime_factory: Any, llm: FakeOpenAI, pool: Pool
) -> None:
    rt = await runtime_factory(**EMBED)
    # The first embedding request hangs: the turn must not wait for it.
    llm.delay_embeddings_next(1, 2.0)
    llm.script("Noted: you are a nurse.")
    result = await rt.service.handle_message(ANNA, "I work as a nurse")
    assert result.ok and result.reply == "Noted: you are a nurse."
    await wait_for(lambda: asyncio.sleep(0, bool(llm.embedding_requests)))
    # The user's message alone (the reply comes along as its neighbour), without its
    # time stamp.
    assert llm.embedding_requests[0]["input"] == ["I work as a nurse"]
    assert await vectors_of(pool, ANNA.owner_id) == {}
    await settle(rt)
    stored = await vectors_of(pool, ANNA.owner_id)
    assert set(stored.values()) == {"openai:fake-embed"} and len(stored) == 1


async def test_a_paraphrase_is_found_only_through_embeddings(
    runtime_factory: Any, llm: FakeOpenAI
) -> None:
    llm.embedding_synonyms = {"nurse": "hospital", "medic": "hospital"}
    # A fixed reply: the default echo carries the clock ("… 14:…"), and the fake's 64
    # dimensions let such a stem collide with the query's (as "14" does with "job").
    llm.default_reply = "Noted"
    rt = await runtime_factory(**EMBED)
    for text in ("I work as a nurse", "The weather is fine", "Bought a new phone"):
        await rt.service.handle_message(ANNA, text)
    await settle(rt)
    found = await search_tool(rt, ANNA.owner_id, "medic job")
    assert found.splitlines()[1].endswith("user: I work as a nurse")
    off = await runtime_factory()  # EMBEDDING_PROVIDER=off: lexical alone
    assert await search_tool(off, ANNA.owner_id, "medic job") == "Nothing found for 'medic job'."


async def test_a_failing_embedding_endpoint_leaves_search_working(
    runtime_factory: Any, llm: FakeOpenAI, pool: Pool
) -> None:
    llm.embeddings_down = True
    rt = await runtime_factory(**EMBED)
    llm.script("ok")
    result = await rt.service.handle_message(ANNA, "My passport is in the drawer")
    assert result.ok and result.reply == "ok"
    await settle(rt)
    assert rt.embeddings.failures == 1 and await vectors_of(pool, ANNA.owner_id) == {}
    found = await search_tool(rt, ANNA.owner_id, "passport")
    assert found.startswith("Found 1 message(s) for 'passport'") and "drawer" in found
    assert "error" not in found.lower() and "embedding" not in found.lower()
    # The endpoint is back: what waited is embedded by the next run.
    llm.embeddings_down = False
    assert await rt.embeddings.run_once() == 1
    assert len(await vectors_of(pool, ANNA.owner_id)) == 1


async def test_a_slow_query_embedding_falls_back_to_lexical(
    runtime_factory: Any, llm: FakeOpenAI, monkeypatch: Any
) -> None:
    rt = await runtime_factory(**EMBED)
    llm.script("ok")
    await rt.service.handle_message(ANNA, "My passport is in the drawer")
    monkeypatch.setattr("src.graph.tools.QUERY_EMBED_SECONDS", 0.2)
    llm.delay_embeddings_next(1, 3.0)
    found = await search_tool(rt, ANNA.owner_id, "passport")
    assert found.startswith("Found 1 message(s) for 'passport'")


async def test_a_new_model_re_embeds_and_search_compares_one_model(
    runtime_factory: Any, llm: FakeOpenAI, pool: Pool
) -> None:
    llm.embedding_models.append("fake-embed-2")
    rt = await runtime_factory(**EMBED)
    for text in ("I work as a nurse", "The weather is fine"):
        await rt.service.handle_message(ANNA, text)
    await settle(rt)
    assert set((await vectors_of(pool, ANNA.owner_id)).values()) == {"openai:fake-embed"}
    new = await runtime_factory(embedding_provider="openai", embedding_model="fake-embed-2")
    assert new.embeddings is not None
    repo = EmbeddingRepository(pool)
    assert (await repo.counts("openai:fake-embed-2"))["other_models"] == 2
    # Until re-embedded, the old model's vectors are not compared with the new query's.
    search = SearchRepository(pool)
    query = SemanticQuery(await new.deps.embedder.query("nurse"), "openai:fake-embed-2")
    ranks = await search.rankings(ANNA.owner_id, "nurse", semantic=query)
    assert ranks.semantic == []
    while await new.embeddings.run_once():
        pass
    assert set((await vectors_of(pool, ANNA.owner_id)).values()) == {"openai:fake-embed-2"}
    ranks = await search.rankings(ANNA.owner_id, "nurse", semantic=query)
    assert ranks.semantic and len(ranks.semantic) == 2


def test_fusion_and_cosine_ranking() -> None:
    # Equal weights: an id in both rankings beats ids in one.
    assert fuse([([1, 2, 3], 1.0), ([4, 2, 5], 1.0)])[0] == 2
    # A zero-weight ranking only breaks ties; a heavier one leads.
    assert fuse([([1, 2], 1.0), ([3], 0.0)]) == [1, 2, 3]
    assert fuse([([1], 1.0), ([2], 2.0)]) == [2, 1]
    matrix = np.array([[1, 0], [0.6, 0.8], [0, 1]], dtype=np.float32)
    assert cosine_ranking([10, 11, 12], matrix, np.array([0.0, 1.0]), 2) == [12, 11]
    assert cosine_ranking([], np.zeros((0, 0)), np.array([1.0]), 5) == []
    assert cosine_ranking([10], matrix[:1], np.array([1.0, 0.0, 0.0]), 5) == []  # other dims


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    owners=st.lists(st.integers(0, 3), min_size=1, max_size=30),
    searches=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2**31)), max_size=6),
)
async def test_a_semantic_search_never_returns_another_owners_message(
    pool: Pool, owners: list[int], searches: list[tuple[int, int]]
) -> None:
    base = next(OWNER_BLOCKS)
    repo, embeddings = ConversationRepository(pool), EmbeddingRepository(pool)
    owned: dict[int, int] = {}
    items = []
    for n, owner in enumerate(owners):
        conv = await repo.get_or_create_conversation(base + owner)
        row = await repo.append_message(conv, "user", f"message {n}")
        owned[row["id"]] = base + owner
        items.append(Pending(row["id"], base + owner, row["content"]))
    rng = np.random.default_rng(len(owners))
    vectors = rng.standard_normal((len(items), 8)).astype(np.float32)
    await embeddings.store("m", items, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    search = SearchRepository(pool)
    for owner, seed in searches:
        query = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
        semantic = SemanticQuery(query / np.linalg.norm(query), "m")
        hits = await search.search_messages(base + owner, "message", 50, semantic=semantic)
        assert all(owned[h["id"]] == base + owner for h in hits)
        assert len(hits) == min(50, sum(1 for o in owned.values() if o == base + owner))


@pytest.mark.slow
def test_db_embed_backfills(fresh_schema: str, llm: FakeOpenAI, tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("EMBEDDING_", "OPENAI_", "DATABASE_", "PG_", "TEST_DATABASE"))
    }
    env |= {
        "DATABASE_URL": fresh_schema,
        "EMBEDDING_PROVIDER": "openai",
        "EMBEDDING_MODEL": "fake-embed",
        "EMBEDDING_BASE_URL": llm.base_url,
        "EMBEDDING_API_KEY": "k",
        "PYTHONPATH": str(REPO_ROOT),
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "src.cli", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert cli("db", "migrate").returncode == 0
    seed = (
        "import asyncio, sys\n"
        "from src.storage.pg_client import make_pool\n"
        "from src.storage.conversation_repo import ConversationRepository\n"
        "async def main():\n"
        "    pool = make_pool(sys.argv[1], 1, 2); await pool.open()\n"
        "    repo = ConversationRepository(pool)\n"
        "    conv = await repo.get_or_create_conversation(7)\n"
        "    for i in range(70): await repo.append_message(conv, 'user', f'note {i}')\n"
        "    await pool.close()\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", seed, fresh_schema], env=env, cwd=REPO_ROOT, timeout=60
    )
    assert done.returncode == 0
    status = cli("db", "embed", "--status")
    assert status.returncode == 0, status.stderr
    assert "openai:fake-embed: 0 embedded, 70 pending" in status.stdout
    assert llm.embedding_requests == []
    run = cli("db", "embed")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "done: 70 embedded, 0 pending"
    assert [len(r["input"]) for r in llm.embedding_requests] == [32, 32, 6]


async def test_the_query_is_embedded_while_the_search_reads(pool: Pool, monkeypatch: Any) -> None:
    owner = next(OWNER_BLOCKS)
    repo, embeddings = ConversationRepository(pool), EmbeddingRepository(pool)
    conv = await repo.get_or_create_conversation(owner)
    rows = [await repo.append_message(conv, "user", t) for t in ("red apples", "green pears")]
    items = [Pending(r["id"], owner, r["content"]) for r in rows]
    await embeddings.store("m", items, np.eye(2, dtype=np.float32))
    search = SearchRepository(pool)
    read = asyncio.Event()
    real_read = search.embeddings.owner_vectors

    async def owner_vectors(*args: Any, **kwargs: Any) -> Any:
        out = await real_read(*args, **kwargs)
        read.set()
        return out

    monkeypatch.setattr(search.embeddings, "owner_vectors", owner_vectors)

    async def embed() -> np.ndarray:
        # Finishes only once the vectors were read: a search that awaited the embedding
        # before reading would never get here.
        await asyncio.wait_for(read.wait(), 5)
        return np.array([0.0, 1.0], dtype=np.float32)

    ranks = await search.rankings(owner, "apples", semantic=SemanticQuery(embed(), "m"))
    assert ranks.lexical == [rows[0]["id"]]
    assert ranks.semantic == [rows[1]["id"], rows[0]["id"]]


async def test_a_refused_or_failed_embedding_leaves_lexical_search(pool: Pool) -> None:
    owner = next(OWNER_BLOCKS)
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(owner)
    row = await repo.append_message(conv, "user", "red apples")
    search = SearchRepository(pool)
    # A query of stop words only is refused: the embedding being made is cancelled.
    slow = asyncio.ensure_future(asyncio.sleep(60, np.ones(2)))
    with pytest.raises(StopWordsOnly):
        await search.rankings(owner, "the and of", semantic=SemanticQuery(slow, "m"))
    await asyncio.sleep(0)
    assert slow.cancelled()
    # An embedding that came out None (the provider failed): lexical ranking alone.
    failed = SemanticQuery(asyncio.sleep(0, None), "m")
    ranks = await search.rankings(owner, "apples", semantic=failed)
    assert ranks.lexical == [row["id"]] and ranks.semantic is None


async def test_a_long_query_is_embedded_as_its_content_words(pool: Pool) -> None:
    owner = next(OWNER_BLOCKS)
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(owner)
    await repo.append_message(conv, "user", "my sister lives in Lisbon")
    search = SearchRepository(pool)
    asked: list[str] = []

    async def embed(text: str) -> np.ndarray:
        asked.append(text)
        return np.array([1.0, 0.0], dtype=np.float32)

    short = "Where does my sister live?"
    await search.rankings(owner, short, semantic=SemanticQuery(embed, "m"))
    # Filler, then the question: the model reads only the words lexical search keeps.
    long = (
        "Sorry to ask again, but I really cannot remember it right now, you told me "
        "once before: where does my sister live?"
    )
    assert len(long.split()) > LONG_QUERY_WORDS
    await search.rankings(owner, long, semantic=SemanticQuery(embed, "m"))
    assert asked == [short, "Sorry ask really cannot remember right told sister live"]
    # Stop words alone: refused, nothing embedded.
    with pytest.raises(StopWordsOnly):
        filler = "and so it is that we were there and then it was as it is"
        await search.rankings(owner, filler, semantic=SemanticQuery(embed, "m"))
    assert len(asked) == 2


async def test_the_tool_embeds_a_long_query_as_its_content_words(
    runtime_factory: Any, llm: FakeOpenAI
) -> None:
    rt = await runtime_factory(**EMBED)
    long = (
        "Извини, что опять спрашиваю, но я правда никак не могу сейчас это вспомнить, "
        "где живёт моя сестра?"
    )
    await search_tool(rt, ANNA.owner_id, long)
    await search_tool(rt, ANNA.owner_id, "где живёт моя сестра?")
    inputs = [r["input"] for r in llm.embedding_requests if isinstance(r, dict)]
    texts = [i[0] if isinstance(i, list) else i for i in inputs]
    assert texts[-2:] == [
        "Извини спрашиваю правда никак могу это вспомнить живёт сестра",
        "где живёт моя сестра?",
    ]


async def test_an_owners_vectors_stay_in_memory_and_follow_the_table(pool: Pool) -> None:
    owner = next(OWNER_BLOCKS)
    repo, embeddings = ConversationRepository(pool), EmbeddingRepository(pool)
    conv = await repo.get_or_create_conversation(owner)

    async def add(role: str, text: str, vector: list[float]) -> int:
        row = await repo.append_message(conv, role, text)
        vec = np.asarray([vector], dtype=np.float32)
        await embeddings.store("m", [Pending(row["id"], owner, row["content"])], vec)
        return int(row["id"])

    first = await add("user", "one", [1, 0])
    second = await add("assistant", "two", [0.8, 0.6])
    search = SearchRepository(pool)
    fetched: list[int] = []
    real_fetch = search.embeddings._fetch

    async def fetch(c: Any, params: Any, ids: Any) -> Any:
        fetched.append(len(ids))
        return await real_fetch(c, params, ids)

    search.embeddings._fetch = fetch  # type: ignore[method-assign]
    query = np.array([1.0, 0.0], dtype=np.float32)

    async def semantic(**filters: Any) -> list[int] | None:
        ranks = await search.rankings(owner, "xyzzy", semantic=SemanticQuery(query, "m"), **filters)
        return ranks.semantic

    assert await semantic() == [first, second]
    third = await add("user", "three", [0.9, 0.1])
    # Only the new vector is read; the held ones answer with it.
    assert await semantic() == [first, third, second]
    assert fetched == [2, 1]
    assert await semantic(role="assistant") == [second]
    assert await semantic(exclude_id=first) == [third, second]
    assert await semantic(since=datetime.now(UTC) + timedelta(days=1)) == []
    assert await semantic(until=datetime.now(UTC) + timedelta(days=1)) == [first, third, second]
    # A deleted message leaves the held matrix too (nothing fetched for it).
    async with pool.connection() as conn:
        await conn.execute("DELETE FROM messages WHERE id = %s", (first,))
    assert await semantic() == [third, second]
    assert fetched == [2, 1]
    # Another model's vectors are held apart and never compared.
    ranks = await search.rankings(owner, "xyzzy", semantic=SemanticQuery(query, "other"))
    assert ranks.semantic == []
