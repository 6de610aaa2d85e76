"""Token budgets of the context layers (seed 002), and cutting text to a budget."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from src.config import Settings
from src.graph.tokens import TokenCounter

# Where a text may be cut: after a sentence's end, or at a line break (keyvalue summaries).
_SENTENCE_END = re.compile(r"[.!?…](?=\s)|\n")
_SPACE = re.compile(r"\s+")


def _longest_prefix(text: str, cuts: list[int], fits: Callable[[str], bool]) -> str | None:
    """Return the longest `text[:cut]` that fits, searching the sorted cut positions."""
    lo, hi, best = 0, len(cuts) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = text[: cuts[mid]].rstrip()
        if candidate and fits(candidate):
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    return best


def _longest_suffix(text: str, starts: list[int], fits: Callable[[str], bool]) -> str | None:
    """Return the longest `text[start:]` that fits, searching the sorted start positions
    (a later start leaves less text: once one fits, every later one does)."""
    lo, hi, best = 0, len(starts) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = text[starts[mid] :].strip()
        if candidate and fits(candidate):
            best, hi = candidate, mid - 1
        else:
            lo = mid + 1
    return best


def truncate_text(text: str, budget: int, counter: TokenCounter) -> str:
    """Cut `text` to `budget` tokens after a whole sentence (or line).

    A first sentence longer than the budget is cut between words and ends with " …".
    """
    if counter.count(text) <= budget:
        return text
    if budget <= 0:
        return ""
    cuts = [m.end() for m in _SENTENCE_END.finditer(text)]
    best = _longest_prefix(text, cuts, lambda t: counter.count(t) <= budget)
    if best:
        return best
    words = [m.start() for m in _SPACE.finditer(text)] or list(range(1, len(text)))
    best = _longest_prefix(text, words, lambda t: counter.count(t + " …") <= budget)
    return best + " …" if best else ""


def truncate_start(text: str, budget: int, counter: TokenCounter) -> str:
    """Cut `text` to `budget` tokens from its start: keep the newest part, from a sentence.

    For a running summary, whose oldest details are the first to go. A last sentence
    longer than the budget keeps its last words after "… ".
    """
    if counter.count(text) <= budget:
        return text
    if budget <= 0:
        return ""
    starts = [m.end() for m in _SENTENCE_END.finditer(text)]
    best = _longest_suffix(text, starts, lambda t: counter.count(t) <= budget)
    if best:
        return best
    words = [m.end() for m in _SPACE.finditer(text)]
    best = _longest_suffix(text, words, lambda t: counter.count("… " + t) <= budget)
    if best:
        return "… " + best
    return ""


def split_text(text: str, budget: int, counter: TokenCounter) -> list[str]:
    """Split `text` into consecutive parts of at most `budget` tokens each, every part
    ending on a sentence (or, for a longer sentence, between words): nothing is lost."""
    parts: list[str] = []
    rest = text.strip()
    while rest:
        if counter.count(rest) <= budget:
            parts.append(rest)
            break
        head = truncate_text(rest, budget, counter).removesuffix(" …")
        if not head or not rest.startswith(head):
            head = rest[: max(1, budget)]  # no sentence or word fits: characters
        parts.append(head.strip())
        rest = rest[len(head) :].strip()
    return parts


class CharCounter:
    """A "token counter" counting characters, to cut text to a length on a sentence."""

    name = "characters"

    def count(self, text: str) -> int:
        return len(text)


def shorten(text: str, chars: int) -> str:
    """Return `text` on one line, cut to `chars` characters after a whole sentence."""
    return truncate_text(" ".join(text.split()), chars, CharCounter())


@dataclass
class Layers:
    """Token budgets of the context layers for one model."""

    total: int
    system: int
    facts: int
    summary: int
    working: int

    @classmethod
    def for_model(cls, settings: Settings, model: str, reserve: int = 0) -> Layers:
        """Split `model`'s input budget into the layers' shares.

        `reserve` tokens (the tools' schemas) come off the total only: the layers keep
        their configured shares, and a full context gives way in working memory.
        """
        total = max(256, settings.context_limit(model) - settings.llm_max_output_tokens)
        return cls(
            total=max(128, total - reserve),
            system=int(total * settings.budget_system),
            facts=int(total * settings.budget_facts),
            summary=int(total * settings.budget_summary),
            working=int(total * settings.budget_working),
        )
