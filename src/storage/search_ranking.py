"""Semantic search's side of a search, and the fusion of its ranking with BM25's.

Pure ranking (no SQL): the query's text to embed, cosine ranking of the owner's vectors,
weighted reciprocal rank fusion. src/storage/search_repo.py reads the rows and calls these.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

# Semantic search ranks the owner's newest SEMANTIC_SCAN embedded messages (lexical
# search covers the whole history): the cost is bounded however long the history is.
SEMANTIC_SCAN = 5000
# Words of a query searched for (and embedded, for a long query) at most.
MAX_QUERY_WORDS = 32
# How deep each ranking goes into the fusion, and reciprocal rank fusion's constant:
# measured with `tgagent bench recall --sweep` (k 10, 30, 60 x semantic weights 0.25-2);
# k=10 with equal weights gave the best recall@10 and +5.7 points recall@5 over BM25.
FUSE_DEPTH = 50
RRF_K = 10


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
    scores: dict[int, float] = {}
    first: dict[int, tuple[int, int]] = {}
    for n, (ids, weight) in enumerate(rankings):
        for rank, message_id in enumerate(ids, 1):
            scores[message_id] = scores.get(message_id, 0.0) + weight / (k + rank)
            first.setdefault(message_id, (n, rank))
    return sorted(scores, key=lambda m: (-scores[m], first[m], -m))


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

    def weighted(self, semantic_weight: float) -> list[tuple[list[int], float]]:
        """Return the rankings with their fusion weights (lexical weighs 1)."""
        out = [(self.lexical, 1.0)]
        if self.semantic is not None and semantic_weight > 0:
            out.append((self.semantic, semantic_weight))
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
