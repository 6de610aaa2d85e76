"""Search over one owner's history: BM25 over full text, embeddings, and their fusion.

Lexical search is BM25 over the owner's own index (sql/0007_search_owner.sql); semantic
search ranks the owner's message embeddings (sql/0008_embeddings.sql) by cosine
similarity to the query's; the two rankings are fused by weighted reciprocal rank
fusion. Every query names the owner, so no search can reach another user's messages.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Awaitable
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np

from src.storage.base import Conn, Repository, clean_text
from src.storage.embedding_repo import EmbeddingRepository, VectorFilter
from src.storage.search_bm25 import SearchQuery, StopWordsOnly, bm25, parse_query
from src.storage.search_dates import DateRange, date_range, without_filler
from src.storage.search_day import Found, Span, messages_in_range
from src.storage.search_ranking import (
    FUSE_DEPTH,
    LEXICAL_FLOOR,
    LONG_QUERY_WORDS,
    MAX_QUERY_WORDS,
    RERANK_DEPTH,
    SEMANTIC_SCAN,
    Rankings,
    SemanticQuery,
    cosine_ranking,
    embedding_text,
    fuse_scores,
    held,
    rerank,
    start_embedding,
)
from src.storage.search_sql import (
    CANDIDATES_COMMON,
    CANDIDATES_RARE,
    COMMON_SCAN,
    DF_CAP,
    HITS,
    IN_SCOPE,
    PER_TERM,
    QUERY_TERMS,
    SEARCH_SUBSTRING,
    SUBSTRING_SCAN,
    TERM_STATS,
)

ROLES = ("user", "assistant")


def _like_pattern(query: str) -> str:
    escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


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
        scope: list[uuid.UUID] | None = None,
        now: datetime | None = None,
    ) -> list[dict[str, Any]]:
        """Return the user's messages matching `query`, best first, squashed included.

        Full text over the content words (Russian and English stemming, whole words,
        `word*` for a prefix); when the query has no word to search (a code, a symbol),
        the phrase as a substring of the newest messages. With `semantic`, the owner's
        newest embedded messages are ranked by similarity to it too, and both rankings
        are fused. `since` (inclusive) and `until` (exclusive) bound the time, `role`
        the author, `scope` (conversation ids) the conversations searched (None: all
        the owner's). Each hit carries the next message of its conversation (`next_role`,
        `next_number`, `next_content`). With `now` (the moment of the question) a
        date the query names ("last Tuesday", "в марте") ranks that range's messages
        first. The user's earlier askings of the same question go after the other hits.
        A query that names a time and nothing else ("what happened yesterday?", or stop
        words with `since`/`until`) returns that time's messages, newest first (`find`
        says so). Raises StopWordsOnly when the query's words are all too common to
        search for and it names no time.
        """
        found = await self.find(
            telegram_user_id, query, limit, exclude_id, since, until, role, semantic, scope, now
        )
        return found.rows

    async def find(
        self,
        telegram_user_id: int,
        query: str,
        limit: int = 10,
        exclude_id: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        role: str | None = None,
        semantic: SemanticQuery | None = None,
        scope: list[uuid.UUID] | None = None,
        now: datetime | None = None,
    ) -> Found:
        """Search as `search_messages` does, and say whether the rows are the messages
        of the time the query names (`Found.span`) rather than hits."""
        if role is not None and role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        limit = max(1, min(50, limit))
        dated = date_range(query, now) if now and since is None and until is None else None
        span = Span(dated.since, dated.until) if dated else None
        span = span or (Span(since, until) if since or until else None)

        async def listed() -> Found:
            assert span is not None
            roles = [role] if role else list(ROLES)
            rows = await messages_in_range(
                self.pool, telegram_user_id, span, limit, roles, exclude_id, scope
            )
            return Found(rows, span)

        if dated is not None and not await self._has_terms(without_filler(dated.rest)):
            return await listed()
        try:
            found = await self.rankings(
                telegram_user_id, query, exclude_id, since, until, role, semantic, scope, now
            )
        except StopWordsOnly:
            if span is None:
                raise
            return await listed()
        # More than asked: the answers the user's own questions pushed down.
        scored = fuse_scores(found.weighted(self.semantic_weight))[: max(RERANK_DEPTH, limit)]
        if not scored:
            return Found([])
        best = [message_id for message_id, _score in scored]
        # The lexical arm's first hits, which `held` keeps among the results (past known
        # noise, so a few more); those the fusion put past RERANK_DEPTH are read too.
        arm = fuse_scores(found.lexical_arm().weighted(0))
        lexical = [m for m, _s in arm][: 2 * LEXICAL_FLOOR + 4]
        best += [m for m in lexical if m not in best]
        async with self.pool.connection() as c:
            cur = await c.execute(HITS, {"ids": best, "user": telegram_user_id})
            hits = {r["id"]: r for r in await cur.fetchall()}
        rows = [hits[i] for i in best if i in hits]
        # The lexical arm's best are held among the results (`held`), past known noise.
        return Found(held(query, rerank(query, rows), lexical, limit))

    async def rankings(
        self,
        telegram_user_id: int,
        query: str,
        exclude_id: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        role: str | None = None,
        semantic: SemanticQuery | None = None,
        scope: list[uuid.UUID] | None = None,
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
                    telegram_user_id,
                    query,
                    exclude_id,
                    since,
                    until,
                    role,
                    semantic,
                    started,
                    scope,
                )
            return await self._dated(
                telegram_user_id, query, dated, exclude_id, role, semantic, scope
            )
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
        scope: list[uuid.UUID] | None = None,
    ) -> Rankings:
        """Return the rankings of a query naming a date: over the whole history and over
        the date's range, both without the date's words (they would match every "week")."""
        text = dated.rest if parse_query(dated.rest).words else query
        started: list[asyncio.Future[np.ndarray | None]] = []
        try:
            found = await self._rankings(
                telegram_user_id, text, exclude_id, None, None, role, semantic, started, scope
            )
            # The query's embedding is made once: the range's ranking reads it again.
            vector = started[0].result() if started and started[0].done() else None
            again = (
                SemanticQuery(vector, semantic.model) if semantic and vector is not None else None
            )
            try:
                within = await self._rankings(
                    telegram_user_id,
                    text,
                    exclude_id,
                    dated.since,
                    dated.until,
                    role,
                    again,
                    [],
                    scope,
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
        scope: list[uuid.UUID] | None = None,
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
            "scope": scope,
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

    async def _has_terms(self, text: str) -> bool:
        """Tell whether `text` has a word to search for (not a stop word of its language)."""
        parsed = parse_query(text)
        if not parsed.words:
            return False
        async with self.pool.connection() as c:
            try:
                await self._terms(c, parsed)
            except StopWordsOnly:
                return False
        return True

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
            stats = {r["n"]: int(r["df"]) for r in stats_rows}
            # A message matching a rare and a common term comes back from both reads.
            candidates: dict[int, dict[str, Any]] = {}
            for sql, common in ((CANDIDATES_RARE, False), (CANDIDATES_COMMON, True)):
                chosen = [
                    n for n in range(len(lexemes)) if (stats.get(n + 1, 0) >= DF_CAP) == common
                ]
                if not chosen:
                    continue
                some = {
                    "lexemes": [lexemes[n] for n in chosen],
                    "prefixes": [lexemes[n] in prefixes for n in chosen],
                }
                cur = await c.execute(
                    sql, {**params, **some, "per_term": PER_TERM, "scan": COMMON_SCAN}
                )
                candidates |= {r["id"]: r for r in await cur.fetchall()}
        total = max(stats.pop(0, 0), max(stats.values(), default=0))
        idf = {
            lexemes[n - 1]: math.log(1 + (total - df + 0.5) / (df + 0.5))
            for n, df in stats.items()
            if df
        }
        ranked = bm25(list(candidates.values()), idf, frozenset(prefixes)) if idf else []
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
        if params["scope"] is not None and ids:
            async with self.pool.connection() as c:
                cur = await c.execute(IN_SCOPE, (ids, params["scope"]))
                inside = {r["id"] for r in await cur.fetchall()}
            keep = [i for i, message in enumerate(ids) if message in inside]
            ids, matrix = [ids[i] for i in keep], matrix[keep]
        return cosine_ranking(ids, matrix, vector, FUSE_DEPTH)
