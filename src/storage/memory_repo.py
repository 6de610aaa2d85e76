"""Long-term memory of a user: typed facts, session compacts, and search over history.

Every query names the owner (`telegram_user_id`) in SQL, so no caller can reach another
user's memory.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from src.storage.base import Conn, Repository, clean_text

FACT_TYPES = ("fact", "preference", "hypothesis", "constraint")

# One statement: the old value is read before the upsert (same snapshot), and a change
# is logged only when the value differs.
UPSERT_FACT = """
WITH old AS (
    SELECT value FROM facts WHERE telegram_user_id = %(user)s AND key = %(key)s
), up AS (
    INSERT INTO facts (telegram_user_id, key, value, type, importance, source_conversation_id)
    VALUES (%(user)s, %(key)s, %(value)s, %(type)s, %(importance)s, %(source)s)
    ON CONFLICT (telegram_user_id, key) DO UPDATE SET
        previous_value = CASE WHEN facts.value IS DISTINCT FROM EXCLUDED.value
                              THEN facts.value ELSE facts.previous_value END,
        value = EXCLUDED.value,
        type = EXCLUDED.type,
        importance = EXCLUDED.importance,
        source_conversation_id = EXCLUDED.source_conversation_id,
        updated_at = now()
    RETURNING *
), logged AS (
    INSERT INTO fact_changes (telegram_user_id, key, old_value, new_value, source_conversation_id)
    SELECT %(user)s, %(key)s, old.value, up.value, %(source)s FROM old, up
    WHERE old.value IS DISTINCT FROM up.value
)
SELECT * FROM up
"""
SELECT_FACTS = """
SELECT * FROM facts WHERE telegram_user_id = %s
ORDER BY importance DESC, updated_at DESC, id DESC LIMIT %s
"""
SELECT_FACT_KEYS = """
SELECT key FROM facts WHERE telegram_user_id = %s
ORDER BY importance DESC, updated_at DESC, id DESC LIMIT %s
"""
SELECT_FACT_CHANGES = """
SELECT * FROM fact_changes WHERE telegram_user_id = %s
ORDER BY changed_at DESC, id DESC LIMIT %s
"""
DELETE_FACTS = "DELETE FROM facts WHERE telegram_user_id = %s"
# MAX_FACTS: keep the most important facts, the most recently confirmed first among equals.
PRUNE_FACTS = """
DELETE FROM facts WHERE telegram_user_id = %s AND id NOT IN (
    SELECT id FROM facts WHERE telegram_user_id = %s
    ORDER BY importance DESC, updated_at DESC, id DESC LIMIT %s
)
"""
DELETE_FACT_CHANGES = "DELETE FROM fact_changes WHERE telegram_user_id = %s"

INSERT_COMPACT = """
INSERT INTO session_compacts
    (telegram_user_id, conversation_id, summary, topics, last_action, created_at)
VALUES (%s, %s, %s, %s, %s, COALESCE(%s, now()))
ON CONFLICT (conversation_id, created_at) DO UPDATE SET
    summary = EXCLUDED.summary, topics = EXCLUDED.topics, last_action = EXCLUDED.last_action
WHERE session_compacts.telegram_user_id = EXCLUDED.telegram_user_id
RETURNING *
"""
# A plain-text stand-in, stored while the model is slow, never replaces the model's compact.
INSERT_COMPACT_IF_NONE = """
INSERT INTO session_compacts
    (telegram_user_id, conversation_id, summary, topics, last_action, created_at)
VALUES (%s, %s, %s, %s, %s, COALESCE(%s, now()))
ON CONFLICT (conversation_id, created_at) DO NOTHING
RETURNING *
"""
# Keep only the newest `keep` compacts of the user.
PRUNE_COMPACTS = """
DELETE FROM session_compacts WHERE telegram_user_id = %s AND id NOT IN (
    SELECT id FROM session_compacts WHERE telegram_user_id = %s
    ORDER BY created_at DESC, id DESC LIMIT %s
)
"""
SELECT_COMPACTS = """
SELECT * FROM session_compacts WHERE telegram_user_id = %s
ORDER BY created_at DESC, id DESC LIMIT %s
"""
DELETE_COMPACTS = "DELETE FROM session_compacts WHERE telegram_user_id = %s"

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
_VECTOR_ENTRY = re.compile(r"'((?:[^']|'')*)'(?::([0-9A-D,]+))?")

# No searchable word (a code, a symbol): the phrase as a substring of the owner's newest
# SUBSTRING_SCAN messages only, so the cost never grows with the history.
SEARCH_SUBSTRING = """
SELECT m.id, m.conversation_id, m.number, m.role, m.content, m.created_at,
       m.squashed_at IS NOT NULL AS squashed,
       NULL AS next_role, NULL AS next_number, NULL AS next_content
FROM (
    SELECT m.id FROM messages m
    WHERE m.owner_id = %(user)s AND m.role IN ('user', 'assistant')
    ORDER BY m.id DESC LIMIT %(scan)s
) recent JOIN messages m ON m.id = recent.id
WHERE m.role = ANY(%(roles)s) AND m.id <> %(exclude)s
  AND NOT (m.meta IS NOT NULL AND m.meta ? 'frs_summary')
  AND (%(since)s::timestamptz IS NULL OR m.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR m.created_at < %(until)s::timestamptz)
  AND search_text(m.content) ILIKE %(pattern)s
ORDER BY m.created_at DESC, m.id DESC LIMIT %(limit)s
"""
SUBSTRING_SCAN = 5000
MAX_QUERY_WORDS = 32

# Silent since `before`, with messages the session compact does not cover yet.
SELECT_IDLE_CONVERSATIONS = """
SELECT id, telegram_user_id, last_message_at FROM conversations
WHERE last_message_at < %s AND (ended_at IS NULL OR ended_at < last_message_at)
ORDER BY last_message_at LIMIT %s
"""
MARK_SESSION_ENDED = "UPDATE conversations SET ended_at = %s WHERE id = %s"

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


def vector_terms(vector: str) -> dict[str, int]:
    """Return a stored search vector's terms (owner prefix removed) and their frequencies."""
    terms: dict[str, int] = {}
    for match in _VECTOR_ENTRY.finditer(vector):
        lexeme = match.group(1).replace("''", "'").replace("\\\\", "\\")
        terms[lexeme.split("|", 1)[-1]] = (match.group(2) or "").count(",") + 1
    return terms


def bm25(
    candidates: list[dict[str, Any]], idf: dict[str, float], prefixes: frozenset[str]
) -> list[tuple[float, dict[str, Any]]]:
    """Score candidates by BM25 over the query terms, best first (ties: the newest)."""
    docs = [(c, vector_terms(c["vector"])) for c in candidates]
    avgdl = sum(sum(t.values()) for _, t in docs) / max(1, len(docs))
    scored = []
    for row, terms in docs:
        dl = sum(terms.values())
        score = 0.0
        for term, weight in idf.items():
            if term in prefixes:
                tf = sum(f for lexeme, f in terms.items() if lexeme.startswith(term))
            else:
                tf = terms.get(term, 0)
            if tf:
                norm = BM25_K1 * (1 - BM25_B + BM25_B * dl / max(avgdl, 1.0))
                score += weight * tf * (BM25_K1 + 1) / (tf + norm)
        scored.append((score, row))
    scored.sort(key=lambda x: (x[0], x[1]["created_at"], x[1]["id"]), reverse=True)
    return scored


def _like_pattern(query: str) -> str:
    escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class StopWordsOnly(ValueError):
    """The query has words, but only ones too common to search for."""


class MemoryRepository(Repository):
    """Facts, compacts and history search, always scoped to one owner id."""

    # --- facts -----------------------------------------------------------------------

    async def upsert_fact(
        self,
        telegram_user_id: int,
        key: str,
        value: str,
        type_: str = "fact",
        importance: int = 5,
        source_conversation_id: uuid.UUID | None = None,
        conn: Conn | None = None,
    ) -> dict[str, Any]:
        """Store a fact; a newer value for the same key replaces the old one (logged)."""
        if type_ not in FACT_TYPES:
            raise ValueError(f"fact type must be one of {FACT_TYPES}, not {type_!r}")
        params = {
            "user": telegram_user_id,
            "key": clean_text(key.strip())[:200],
            "value": clean_text(value.strip())[:2000],
            "type": type_,
            "importance": max(1, min(10, int(importance))),
            "source": source_conversation_id,
        }
        async with self._conn(conn) as c:
            row = await (await c.execute(UPSERT_FACT, params)).fetchone()
            assert row is not None
            return row

    async def upsert_facts(
        self,
        telegram_user_id: int,
        facts: Iterable[dict[str, Any]],
        source_conversation_id: uuid.UUID | None = None,
        keep: int = 0,
        conn: Conn | None = None,
    ) -> int:
        """Store extracted facts (key, value, type, importance) in one transaction.

        With `keep` > 0, only the user's `keep` most important facts remain afterwards.
        """
        stored = 0
        async with self._conn(conn) as c, c.transaction():
            for fact in facts:
                await self.upsert_fact(
                    telegram_user_id,
                    fact["key"],
                    fact["value"],
                    fact["type"],
                    fact["importance"],
                    source_conversation_id,
                    conn=c,
                )
                stored += 1
            if keep > 0:
                await c.execute(PRUNE_FACTS, (telegram_user_id, telegram_user_id, keep))
        return stored

    async def list_facts(
        self, telegram_user_id: int, limit: int = 100, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the user's facts, most important first (then the newest)."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_FACTS, (telegram_user_id, limit))
            return list(await cur.fetchall())

    async def fact_keys(
        self, telegram_user_id: int, limit: int = 100, conn: Conn | None = None
    ) -> list[str]:
        """Return the keys of the user's most important facts."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_FACT_KEYS, (telegram_user_id, limit))
            return [row["key"] for row in await cur.fetchall()]

    async def fact_changes(
        self, telegram_user_id: int, limit: int = 50, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the latest changes of the user's facts, newest first."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_FACT_CHANGES, (telegram_user_id, limit))
            return list(await cur.fetchall())

    async def delete_facts(self, telegram_user_id: int, conn: Conn | None = None) -> int:
        """Delete all the user's facts and their change log; return how many facts."""
        async with self._conn(conn) as c, c.transaction():
            await c.execute(DELETE_FACT_CHANGES, (telegram_user_id,))
            return (await c.execute(DELETE_FACTS, (telegram_user_id,))).rowcount

    # --- session compacts (seed 001) ---------------------------------------------------

    async def add_compact(
        self,
        telegram_user_id: int,
        conversation_id: uuid.UUID | None,
        summary: str,
        topics: Sequence[str],
        last_action: str,
        keep: int = 5,
        conn: Conn | None = None,
        created_at: datetime | None = None,
        replace: bool = True,
    ) -> dict[str, Any] | None:
        """Store (or refresh) a session's compact; keep the user's newest `keep`.

        A session is identified by its conversation and `created_at`, the time of its
        last message: compacting the same session again replaces its compact, unless
        `replace` is false (then an existing compact stays).
        """
        params = (
            telegram_user_id,
            conversation_id,
            clean_text(summary),
            [clean_text(t)[:100] for t in topics][:20],
            clean_text(last_action)[:500],
            created_at,
        )
        async with self._conn(conn) as c, c.transaction():
            sql = INSERT_COMPACT if replace else INSERT_COMPACT_IF_NONE
            row = await (await c.execute(sql, params)).fetchone()
            await c.execute(PRUNE_COMPACTS, (telegram_user_id, telegram_user_id, keep))
            return row

    async def list_compacts(
        self, telegram_user_id: int, limit: int = 5, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the compacts of the user's ended sessions, newest first."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_COMPACTS, (telegram_user_id, limit))
            return list(await cur.fetchall())

    async def delete_compacts(self, telegram_user_id: int, conn: Conn | None = None) -> int:
        """Delete all the user's compacts."""
        async with self._conn(conn) as c:
            return (await c.execute(DELETE_COMPACTS, (telegram_user_id,))).rowcount

    async def idle_conversations(
        self, silent_since: datetime, limit: int = 100, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return conversations silent since `silent_since` whose session is not compacted."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_IDLE_CONVERSATIONS, (silent_since, limit))
            return list(await cur.fetchall())

    async def mark_session_ended(
        self, conversation_id: uuid.UUID, at: datetime, conn: Conn | None = None
    ) -> None:
        """Record that the session compact covers the conversation up to `at`."""
        async with self._conn(conn) as c:
            await c.execute(MARK_SESSION_ENDED, (at, conversation_id))

    # --- search over history -----------------------------------------------------------

    async def search_messages(
        self,
        telegram_user_id: int,
        query: str,
        limit: int = 10,
        conn: Conn | None = None,
        exclude_id: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        role: str | None = None,
    ) -> list[dict[str, Any]]:
        """Return the user's messages matching `query`, best first, squashed included.

        Full text over the content words (Russian and English stemming, whole words,
        `word*` for a prefix); when the query has no word to search (a code, a symbol),
        the phrase as a substring of the newest messages. `since` (inclusive) and `until`
        (exclusive) bound the time, `role` the author. Each hit carries the next message
        of its conversation (`next_role`, `next_number`, `next_content`). Raises
        StopWordsOnly when the query's words are all too common to search for.
        """
        query = clean_text(query).strip()[:500]
        if not query:
            return []
        if role is not None and role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        params = {
            "user": telegram_user_id,
            "exclude": exclude_id or 0,
            "limit": max(1, min(50, limit)),
            "roles": [role] if role else list(ROLES),
            "since": since,
            "until": until,
        }
        parsed = parse_query(query)
        async with self._conn(conn) as c:
            if parsed.words:
                rows = await self._bm25(c, telegram_user_id, parsed, params)
                if rows:
                    return rows
            substring = {"pattern": _like_pattern(query), "scan": SUBSTRING_SCAN}
            cur = await c.execute(SEARCH_SUBSTRING, {**params, **substring})
            return list(await cur.fetchall())

    async def _bm25(
        self, c: Conn, owner: int, parsed: SearchQuery, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Rank the owner's messages matching any content word by BM25; best first."""
        cur = await c.execute(QUERY_TERMS, (parsed.words,))
        lexemes: list[str] = []
        prefixes: set[str] = set()
        for row in (await cur.fetchall())[:MAX_QUERY_WORDS]:
            for lexeme in row["lexemes"]:
                if lexeme not in lexemes:
                    lexemes.append(lexeme)
                if row["word"] in parsed.prefixes:
                    prefixes.add(lexeme)
        if not lexemes:
            raise StopWordsOnly(" ".join(parsed.words))
        terms = {"lexemes": lexemes, "prefixes": [x in prefixes for x in lexemes]}
        cur = await c.execute(TERM_STATS, {**params, **terms, "cap": DF_CAP})
        stats = {r["n"]: int(r["df"]) for r in await cur.fetchall()}
        total = max(stats.pop(0, 0), max(stats.values(), default=0))
        idf = {
            lexemes[n - 1]: math.log(1 + (total - df + 0.5) / (df + 0.5))
            for n, df in stats.items()
            if df
        }
        if not idf:
            return []
        cur = await c.execute(CANDIDATES, {**params, **terms, "per_term": PER_TERM})
        ranked = bm25(list(await cur.fetchall()), idf, frozenset(prefixes))
        best = [row["id"] for score, row in ranked if score > 0][: params["limit"]]
        cur = await c.execute(HITS, {"ids": best, "user": owner})
        hits = {r["id"]: r for r in await cur.fetchall()}
        return [hits[i] for i in best if i in hits]
