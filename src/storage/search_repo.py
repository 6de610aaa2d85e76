"""Search over one owner's history: BM25 over full text, embeddings, and their fusion.

Lexical search is BM25 over the owner's own index (sql/0007_search_owner.sql); semantic
search ranks the owner's message embeddings (sql/0008_embeddings.sql) by cosine
similarity to the query's; the two rankings are fused by weighted reciprocal rank
fusion. Every query names the owner, so no search can reach another user's messages.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from src.storage.base import Conn, Repository, clean_text
from src.storage.embedding_repo import EmbeddingRepository, VectorFilter
from src.storage.search_dates import DateRange, date_range
from src.storage.search_ranking import (
    FUSE_DEPTH,
    LONG_QUERY_WORDS,
    MAX_QUERY_WORDS,
    RERANK_DEPTH,
    SEMANTIC_SCAN,
    Rankings,
    SemanticQuery,
    cosine_ranking,
    embedding_text,
    fuse_scores,
    rerank,
    start_embedding,
)

# Lexical search is BM25 over the owner's own index (sql/0007_search_owner.sql): every
# user and assistant message carries its lexemes prefixed with its owner's id, so each
# query term reads one owner's posting list. Russian and English words are stemmed by the
# `russian` configuration; the time stamp is not searchable text.
#
# The query's content words, each with the lexemes it stems to (stop words, Russian or
# English, dropped).
QUERY_TERMS = """
SELECT w.word, array(SELECT lexeme FROM unnest(to_tsvector('russian', w.word))) AS lexemes
FROM unnest(%s::text[]) WITH ORDINALITY AS w(word, n)
WHERE to_tsvector('english', w.word) <> ''::tsvector
  AND to_tsvector('russian', w.word) <> ''::tsvector
ORDER BY w.n
"""
# Document frequency per term, counted up to a cap (a term in more messages than that is
# common: its weight is near zero anyway), and the owner's message count.
TERM_STATS = """
SELECT t.n, (
    SELECT count(*) FROM (
        SELECT 1 FROM messages m
        WHERE m.search_vector @@ owner_term(%(user)s, t.lexeme, t.prefix) LIMIT %(cap)s
    ) d
) AS df
FROM unnest(%(lexemes)s::text[], %(prefixes)s::bool[]) WITH ORDINALITY AS t(lexeme, prefix, n)
UNION ALL
SELECT 0, coalesce(sum(next_message_number - 1), 0) FROM conversations
WHERE telegram_user_id = %(user)s
"""
# Candidates: up to `per_term` messages per term (all of a rare term's), with their vectors.
CANDIDATES = """
SELECT DISTINCT c.id, c.vector, c.created_at FROM
unnest(%(lexemes)s::text[], %(prefixes)s::bool[]) AS t(lexeme, prefix),
LATERAL (
    SELECT m.id, m.search_vector::text AS vector, m.created_at FROM messages m
    WHERE m.search_vector @@ owner_term(%(user)s, t.lexeme, t.prefix)
      AND m.role = ANY(%(roles)s) AND m.id <> %(exclude)s
      AND (%(since)s::timestamptz IS NULL OR m.created_at >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR m.created_at < %(until)s::timestamptz)
    LIMIT %(per_term)s
) c
"""
# The hits themselves, each with the next user or assistant message of its conversation
# (a question's answer is often the next message).
HITS = """
SELECT m.id, m.conversation_id, m.number, m.role, m.content, m.created_at,
       m.squashed_at IS NOT NULL AS squashed,
       nb.role AS next_role, nb.number AS next_number, nb.content AS next_content
FROM messages m
LEFT JOIN LATERAL (
    SELECT n.role, n.number, n.content FROM messages n
    WHERE n.conversation_id = m.conversation_id AND n.id > m.id
      AND n.role IN ('user', 'assistant')
      AND NOT (n.meta IS NOT NULL AND n.meta ? 'frs_summary')
    ORDER BY n.id LIMIT 1
) nb ON true
WHERE m.id = ANY(%(ids)s) AND m.owner_id = %(user)s
"""
DF_CAP = 5000
PER_TERM = 300
# BM25's usual constants: term-frequency saturation and length normalization.
BM25_K1 = 1.2
BM25_B = 0.75

# No searchable word (a code, a symbol): the phrase as a substring of the owner's newest
# SUBSTRING_SCAN messages only, so the cost never grows with the history.
SEARCH_SUBSTRING = """
SELECT m.id FROM (
    SELECT m.id FROM messages m
    WHERE m.owner_id = %(user)s AND m.search_vector IS NOT NULL
    ORDER BY m.id DESC LIMIT %(scan)s
) recent JOIN messages m ON m.id = recent.id
WHERE m.role = ANY(%(roles)s) AND m.id <> %(exclude)s
  AND (%(since)s::timestamptz IS NULL OR m.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR m.created_at < %(until)s::timestamptz)
  -- the plain match first: it is cheap, and only its rare hits pay for search_text()
  AND m.content ILIKE %(pattern)s AND search_text(m.content) ILIKE %(pattern)s
ORDER BY m.created_at DESC, m.id DESC LIMIT %(limit)s
"""
SUBSTRING_SCAN = 5000

_WORD = re.compile(r"(\w+)(\*)?")
ROLES = ("user", "assistant")


@dataclass(frozen=True)
class SearchQuery:
    """What the model asked to search for, parsed: words, prefixes, filters."""

    words: list[str]
    """The query's words, in order (underscores split words)."""
    prefixes: frozenset[str]
    """Words the query marked as prefixes (`word*`)."""


def parse_query(text: str) -> SearchQuery:
    """Return the words of a query; `word*` asks for words beginning with `word`."""
    words: list[str] = []
    prefixes: set[str] = set()
    for match in _WORD.finditer(text.replace("_", " ")):
        word = match.group(1)[:50]
        if len(word) < 2 and not word.isdigit():
            continue
        words.append(word)
        if match.group(2):
            prefixes.add(word)
    return SearchQuery(words, frozenset(prefixes))


def term_frequencies(
    vector: str, terms: Iterable[str], prefixes: frozenset[str]
) -> tuple[int, dict[str, int]]:
    """Return a stored search vector's length (its positions) and the frequency of each
    of `terms` in it (of the lexemes beginning with a term of `prefixes`).

    Only the query's terms are looked up in the vector's text (`'owner|lexeme':1,5 ...`):
    a candidate costs a few substring searches, not a parse of all its lexemes.
    """
    length = vector.count(",") + vector.count("':")
    found: dict[str, int] = {}
    for term in terms:
        needle = "|" + term.replace("\\", "\\\\").replace("'", "''")
        prefix = term in prefixes
        tf = 0
        at = vector.find(needle)
        while at >= 0:
            end = at + len(needle)
            if prefix:
                end = _lexeme_end(vector, end)
            if end < len(vector) and vector[end] == "'" and vector[end + 1 : end + 2] != "'":
                stop = vector.find(" ", end)
                positions = vector[end + 1 : stop if stop >= 0 else len(vector)]
                tf += positions.count(",") + 1 if positions.startswith(":") else 1
            at = vector.find(needle, end)
        if tf:
            found[term] = tf
    return length, found


def _lexeme_end(vector: str, start: int) -> int:
    """Return the index of the quote closing the lexeme that runs through `start`."""
    while True:
        quote = vector.find("'", start)
        if quote < 0 or vector[quote + 1 : quote + 2] != "'":
            return quote if quote >= 0 else len(vector)
        start = quote + 2


def bm25(
    candidates: list[dict[str, Any]], idf: dict[str, float], prefixes: frozenset[str]
) -> list[tuple[float, dict[str, Any]]]:
    """Score candidates by BM25 over the query terms, best first (ties: the newest)."""
    docs = [(c, term_frequencies(c["vector"], idf, prefixes)) for c in candidates]
    avgdl = sum(length for _, (length, _tf) in docs) / max(1, len(docs))
    scored = []
    for row, (dl, tfs) in docs:
        norm = BM25_K1 * (1 - BM25_B + BM25_B * dl / max(avgdl, 1.0))
        score = sum(idf[t] * tf * (BM25_K1 + 1) / (tf + norm) for t, tf in tfs.items())
        scored.append((score, row))
    scored.sort(key=lambda x: (x[0], x[1]["created_at"], x[1]["id"]), reverse=True)
    return scored


def _like_pattern(query: str) -> str:
    escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class StopWordsOnly(ValueError):
    """The query has words, but only ones too common to search for."""


class SearchRepository(Repository):
    """search_history's storage side: one owner's messages, best match first."""

    def __init__(self, pool: Any, semantic_weight: float = 1.0) -> None:
        super().__init__(pool)
        self.semantic_weight = semantic_weight
        self.embeddings = EmbeddingRepository(pool)

    async def search_messages(
        self,
        telegram_user_id: int,
        query: str,
        limit: int = 10,
        exclude_id: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        role: str | None = None,
        semantic: SemanticQuery | None = None,
        now: datetime | None = None,
    ) -> list[dict[str, Any]]:
        """Return the user's messages matching `query`, best first, squashed included.

        Full text over the content words (Russian and English stemming, whole words,
        `word*` for a prefix); when the query has no word to search (a code, a symbol),
        the phrase as a substring of the newest messages. With `semantic`, the owner's
        newest embedded messages are ranked by similarity to it too, and both rankings
        are fused. `since` (inclusive) and `until` (exclusive) bound the time, `role`
        the author. Each hit carries the next message of its conversation (`next_role`,
        `next_number`, `next_content`). With `now` (the moment of the question) a
        date the query names ("last Tuesday", "в марте") ranks that range's messages
        first. The user's earlier askings of the same question go after the other hits.
        Raises StopWordsOnly when the query's words are all too common to search for.
        """
        found = await self.rankings(
            telegram_user_id, query, exclude_id, since, until, role, semantic, now
        )
        limit = max(1, min(50, limit))
        # More than asked: the answers the user's own questions pushed down.
        scored = fuse_scores(found.weighted(self.semantic_weight))[: max(RERANK_DEPTH, limit)]
        if not scored:
            return []
        best = [message_id for message_id, _score in scored]
        async with self.pool.connection() as c:
            cur = await c.execute(HITS, {"ids": best, "user": telegram_user_id})
            hits = {r["id"]: r for r in await cur.fetchall()}
        rows = [hits[i] for i in best if i in hits]
        return rerank(query, rows, dict(scored))[:limit]

    async def rankings(
        self,
        telegram_user_id: int,
        query: str,
        exclude_id: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        role: str | None = None,
        semantic: SemanticQuery | None = None,
        now: datetime | None = None,
    ) -> Rankings:
        """Return the lexical and (with `semantic`) the semantic ranking, unfused, each
        FUSE_DEPTH deep, and those of the range of a date the query names; the
        arguments mean what they mean for `search_messages`."""
        started: list[asyncio.Future[np.ndarray | None]] = []
        dated = date_range(query, now) if now and since is None and until is None else None
        try:
            if dated is None:
                return await self._rankings(
                    telegram_user_id, query, exclude_id, since, until, role, semantic, started
                )
            return await self._dated(telegram_user_id, query, dated, exclude_id, role, semantic)
        finally:
            # A refused query, an error or a cancelled search must not leave it running.
            for embedding in started:
                if not embedding.done():
                    embedding.cancel()

    async def _dated(
        self,
        telegram_user_id: int,
        query: str,
        dated: DateRange,
        exclude_id: int | None,
        role: str | None,
        semantic: SemanticQuery | None,
    ) -> Rankings:
        """Return the rankings of a query naming a date: over the whole history and over
        the date's range, both without the date's words (they would match every "week")."""
        text = dated.rest if parse_query(dated.rest).words else query
        started: list[asyncio.Future[np.ndarray | None]] = []
        try:
            found = await self._rankings(
                telegram_user_id, text, exclude_id, None, None, role, semantic, started
            )
            # The query's embedding is made once: the range's ranking reads it again.
            vector = started[0].result() if started and started[0].done() else None
            again = (
                SemanticQuery(vector, semantic.model) if semantic and vector is not None else None
            )
            try:
                within = await self._rankings(
                    telegram_user_id, text, exclude_id, dated.since, dated.until, role, again, []
                )
            except StopWordsOnly:
                within = Rankings([], None)
        finally:
            for embedding in started:
                if not embedding.done():
                    embedding.cancel()
        return replace(found, dated=within)

    async def _rankings(
        self,
        telegram_user_id: int,
        query: str,
        exclude_id: int | None,
        since: datetime | None,
        until: datetime | None,
        role: str | None,
        semantic: SemanticQuery | None,
        started: list[asyncio.Future[np.ndarray | None]],
    ) -> Rankings:
        query = clean_text(query).strip()[:500]
        parsed = parse_query(query)
        if self.semantic_weight == 0:
            semantic = None
        embedding = None
        if not (callable(semantic and semantic.vector) and len(parsed.words) > LONG_QUERY_WORDS):
            # Embedded as written: started now, made while the query's terms are read.
            embedding = start_embedding(semantic, query)
            started.extend([embedding] if embedding is not None else [])
        if not query:
            return Rankings([], None)
        if role is not None and role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        params: dict[str, Any] = {
            "user": telegram_user_id,
            "exclude": exclude_id or 0,
            "limit": FUSE_DEPTH,
            "roles": [role] if role else list(ROLES),
            "since": since,
            "until": until,
        }
        terms: tuple[list[str], set[str], list[str]] = ([], set(), [])
        if parsed.words:
            # Stop-word-only queries are refused before anything is ranked.
            async with self.pool.connection() as c:
                terms = await self._terms(c, parsed)
        lexemes, prefixes, content = terms
        if embedding is None and semantic is not None:
            embedding = start_embedding(semantic, embedding_text(query, parsed.words, content))
            started.extend([embedding] if embedding is not None else [])
        lexical = self._lexical(query, lexemes, prefixes, params)
        if semantic is None or embedding is None or self.semantic_weight == 0:
            return Rankings(await lexical, None)
        # Three things at once: the index lookups, the vector read (two connections) and
        # the query's embedding, which is still being made.
        found, closest = await asyncio.gather(
            lexical, self._semantic(semantic.model, embedding, params)
        )
        return Rankings(found, closest)

    async def _terms(self, c: Conn, parsed: SearchQuery) -> tuple[list[str], set[str], list[str]]:
        """Return the query's lexemes, those asked as prefixes and its content words;
        refuse stop words only."""
        cur = await c.execute(QUERY_TERMS, (parsed.words,))
        lexemes: list[str] = []
        prefixes: set[str] = set()
        rows = (await cur.fetchall())[:MAX_QUERY_WORDS]
        for row in rows:
            for lexeme in row["lexemes"]:
                if lexeme not in lexemes:
                    lexemes.append(lexeme)
                if row["word"] in parsed.prefixes:
                    prefixes.add(lexeme)
        if not lexemes:
            raise StopWordsOnly(" ".join(parsed.words))
        return lexemes, prefixes, [row["word"] for row in rows]

    async def _lexical(
        self, query: str, lexemes: list[str], prefixes: set[str], params: dict[str, Any]
    ) -> list[int]:
        """Return the BM25 ranking, or with no word matched, the substring matches."""
        if lexemes:
            ranked = await self._bm25(lexemes, prefixes, params)
            if ranked:
                return ranked
        substring = {"pattern": _like_pattern(query), "scan": SUBSTRING_SCAN}
        async with self.pool.connection() as c:
            cur = await c.execute(SEARCH_SUBSTRING, {**params, **substring})
            return [r["id"] for r in await cur.fetchall()]

    async def _bm25(
        self, lexemes: list[str], prefixes: set[str], params: dict[str, Any]
    ) -> list[int]:
        """Rank the owner's messages matching any of `lexemes` by BM25; best first."""
        terms = {"lexemes": lexemes, "prefixes": [x in prefixes for x in lexemes]}
        # One connection, one query after the other: reading both at once on two was no
        # faster beside the query's embedding on two cores (bench/recall's latency part).
        async with self.pool.connection() as c:
            cur = await c.execute(TERM_STATS, {**params, **terms, "cap": DF_CAP})
            stats_rows = await cur.fetchall()
            cur = await c.execute(CANDIDATES, {**params, **terms, "per_term": PER_TERM})
            candidates = list(await cur.fetchall())
        stats = {r["n"]: int(r["df"]) for r in stats_rows}
        total = max(stats.pop(0, 0), max(stats.values(), default=0))
        idf = {
            lexemes[n - 1]: math.log(1 + (total - df + 0.5) / (df + 0.5))
            for n, df in stats.items()
            if df
        }
        ranked = bm25(candidates, idf, frozenset(prefixes)) if idf else []
        return [row["id"] for score, row in ranked if score > 0][:FUSE_DEPTH]

    async def _semantic(
        self, model: str, embedding: Awaitable[np.ndarray | None], params: dict[str, Any]
    ) -> list[int] | None:
        """Return the owner's newest embedded messages closest to the query, best first
        (None when the query's embedding failed)."""
        where = VectorFilter(params["roles"], params["exclude"], params["since"], params["until"])
        read = self.embeddings.owner_vectors(params["user"], model, SEMANTIC_SCAN, where)
        (ids, matrix), vector = await asyncio.gather(read, embedding)
        if vector is None:
            return None
        return cosine_ranking(ids, matrix, vector, FUSE_DEPTH)
