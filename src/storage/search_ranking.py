"""Semantic search's side of a search, and the fusion of its ranking with BM25's.

Pure ranking (no SQL): the query's text to embed, cosine ranking of the owner's vectors,
weighted reciprocal rank fusion. src/storage/search_repo.py reads the rows and calls these.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from src.graph.timestamps import strip_stamp

# Semantic search ranks the owner's newest SEMANTIC_SCAN embedded messages (lexical
# search covers the whole history): the cost is bounded however long the history is.
SEMANTIC_SCAN = 5000
# Words of a query searched for (and embedded, for a long query) at most.
MAX_QUERY_WORDS = 32
# How deep each ranking goes into the fusion, and reciprocal rank fusion's constant:
# measured with `tgagent bench recall --sweep` (k 10-100 x semantic weights 0.5-4 x the
# rerank's constants) on the chats between two friends: k=30 with the semantic ranking
# weighing 3 (SEARCH_SEMANTIC_WEIGHT) gave recall@10 0.81 (k=10, equal weights: 0.69);
# on the planted-facts set it costs 3 points of recall@10 (0.68 against 0.71).
FUSE_DEPTH = 100
RRF_K = 30
# The weight of the rankings within a date the query names, against the whole
# history's (bench recall --sweep, on the dialogues set's temporal questions).
DATED_WEIGHT = 2.0
# A question of the user's that repeats the query nearly word for word is the user asking
# the same thing before, not its answer (the answer is in its next message, shown with
# it): the share of their words the two have in common (of either's, Jaccard) at least.
# Only known noise is set aside: a question is never demoted for being one, people tell
# things in questions ("Did you get to the support group yesterday?"), and on LoCoMo's
# conversations a turn that is a question holds the answer as often as any other.
ECHO_SHARE = 0.6
# How many fused hits are read and reranked: the answers the questions pushed down.
RERANK_DEPTH = 100
# The lexical ranking's first hits that the first ten results always hold (fewer for a
# smaller limit: see `held`): a turn that says the query's rare words outright is not
# lost to the semantic ranking's near misses, so the search never finds less than its
# lexical arm's best (bench recall, every set).
LEXICAL_FLOOR = 3
_WORDS = re.compile(r"\w+")


# A query longer than this many words is embedded as its content words alone (stop words
# dropped, as lexical search drops them): a local model's time grows with the words it
# reads (multilingual-e5-small: about 1 ms a word on one core), and filler around a
# question only blurs its vector. Shorter queries are embedded as written.
LONG_QUERY_WORDS = 12

Embed = Callable[[str], Awaitable[np.ndarray | None]]


@dataclass(frozen=True)
class SemanticQuery:
    """The query's embedding and the model that makes it (only its vectors compare)."""

    vector: np.ndarray | Awaitable[np.ndarray | None] | Embed
    """The embedding; an awaitable still making it; or a function making it from the
    text the search gives it (see `LONG_QUERY_WORDS`). The search reads the owner's
    vectors and runs the lexical ranking meanwhile; None from it: search lexically."""
    model: str


def embedding_text(query: str, words: list[str], content: list[str]) -> str:
    """Return what the query's embedding reads: the query as written, or for a long
    query (more than LONG_QUERY_WORDS `words`) its `content` words, in order."""
    if len(words) <= LONG_QUERY_WORDS or not content:
        return query
    return " ".join(content[:MAX_QUERY_WORDS])


def fuse(rankings: list[tuple[list[int], float]], k: int = RRF_K) -> list[int]:
    """Return ids by weighted reciprocal rank fusion: the sum of weight / (k + rank).

    Ties go to the id ranked first by the earlier ranking, then to the newest id.
    """
    return [message_id for message_id, _score in fuse_scores(rankings, k)]


def fuse_scores(rankings: list[tuple[list[int], float]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Return `fuse`'s ids with their scores, best first."""
    scores: dict[int, float] = {}
    first: dict[int, tuple[int, int]] = {}
    for n, (ids, weight) in enumerate(rankings):
        for rank, message_id in enumerate(ids, 1):
            scores[message_id] = scores.get(message_id, 0.0) + weight / (k + rank)
            first.setdefault(message_id, (n, rank))
    order = sorted(scores, key=lambda m: (-scores[m], first[m], -m))
    return [(m, scores[m]) for m in order]


def cosine_ranking(ids: list[int], matrix: np.ndarray, query: np.ndarray, depth: int) -> list[int]:
    """Return the `depth` ids whose vectors are closest to `query`, best first."""
    if not ids or matrix.shape[1] != query.shape[0]:
        return []
    scores = matrix @ query.astype(np.float32)
    depth = min(depth, len(ids))
    top = np.argpartition(-scores, depth - 1)[:depth]
    order = top[np.lexsort((-np.asarray(ids)[top], -scores[top]))]
    return [int(ids[i]) for i in order]


@dataclass(frozen=True)
class Rankings:
    """One search's rankings before fusion: message ids, best first."""

    lexical: list[int]
    semantic: list[int] | None
    """None when the search had no query embedding (not asked for, or it failed)."""
    dated: Rankings | None = None
    """The rankings within the range of a date the query names ("last Tuesday")."""

    def lexical_arm(self) -> Rankings:
        """Return the lexical rankings alone (what the search gives without embeddings)."""
        dated = self.dated.lexical_arm() if self.dated is not None else None
        return Rankings(self.lexical, None, dated)

    def weighted(
        self, semantic_weight: float, dated_weight: float = DATED_WEIGHT
    ) -> list[tuple[list[int], float]]:
        """Return the rankings with their fusion weights (lexical weighs 1)."""
        out = [(self.lexical, 1.0)]
        if self.semantic is not None and semantic_weight > 0:
            out.append((self.semantic, semantic_weight))
        if self.dated is not None:
            out += [(ids, w * dated_weight) for ids, w in self.dated.weighted(semantic_weight)]
        return out


def start_embedding(
    semantic: SemanticQuery | None, text: str
) -> asyncio.Future[np.ndarray | None] | None:
    """Return the query's embedding as a future, started now (None without one); a
    function making it is given `text`."""
    if semantic is None:
        return None
    vector = semantic.vector
    if isinstance(vector, np.ndarray):
        done: asyncio.Future[np.ndarray | None] = asyncio.get_running_loop().create_future()
        done.set_result(vector)
        return done
    if callable(vector):
        return asyncio.ensure_future(vector(text))
    return asyncio.ensure_future(vector)


def _stems(text: str) -> set[str]:
    """Return the words of `text` cut to five letters: word forms compare equal."""
    return {w[:5] for w in _WORDS.findall(text.lower()) if len(w) >= 3 and not w.isdigit()}


def is_echo(query: str, content: str) -> bool:
    """Tell whether `content` is a question asking again what `query` asks (nearly the
    same words)."""
    if "?" not in content:
        return False
    words, asked = _stems(strip_stamp(content)), _stems(query)
    return bool(words) and len(words & asked) >= ECHO_SHARE * len(words | asked)


def is_noise(query: str, row: dict[str, Any]) -> bool:
    """Tell whether a hit is known noise: the user's own question about the history
    (its turn had the bot search the history: `searched`), or an earlier asking of the
    query itself."""
    if row["role"] != "user":
        return False
    return bool(row.get("searched")) or is_echo(query, strip_stamp(row["content"]).rstrip())


def rerank(query: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the fused hits in their order, known noise (`is_noise`) after the others."""
    return sorted(rows, key=lambda r: is_noise(query, r))


def held(
    query: str,
    rows: list[dict[str, Any]],
    lexical: list[int],
    limit: int,
    floor: int = LEXICAL_FLOOR,
) -> list[dict[str, Any]]:
    """Return the first `limit` of the reranked `rows`, holding the lexical ranking's
    first `floor` hits (not noise; `limit // 3` of them at most) among them: those missing
    take the last places, in the lexical ranking's order."""
    floor = min(floor, limit // 3)
    by_id = {r["id"]: r for r in rows}
    wanted = [by_id[m] for m in lexical if m in by_id and not is_noise(query, by_id[m])]
    top = rows[:limit]
    missing = [r for r in wanted[:floor] if r not in top]
    if not missing:
        return top
    kept = [r for r in top if r not in missing][: limit - len(missing)]
    return kept + missing
