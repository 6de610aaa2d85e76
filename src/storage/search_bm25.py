"""The lexical half of history search in Python: a query's words, and BM25 over the
stored search vectors of the candidates SQL found (src/storage/search_repo.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# BM25's usual constants: term-frequency saturation and length normalization.
BM25_K1 = 1.2
BM25_B = 0.75

_WORD = re.compile(r"(\w+)(\*)?")


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


class StopWordsOnly(ValueError):
    """The query has words, but only ones too common to search for."""
