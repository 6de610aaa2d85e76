"""Working memory: which stored messages of the window the model sees (seed 002).

Messages are grouped into units (a tool-calling answer with all its results) that are
kept or dropped whole, so no request carries a broken tool exchange.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

Row = dict[str, Any]
Unit = list[Row]
Cost = Callable[[Row], int]


def group_units(history: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Group history into units: a tool-calling answer stays with all its results.

    Tool results whose call is outside the window, calls missing a result, and results
    that do not belong to the call before them are turned into plain notes, so that no
    request carries a broken tool exchange.
    """
    units: list[list[dict[str, Any]]] = []
    i = 0
    while i < len(history):
        row = history[i]
        calls = (row.get("meta") or {}).get("tool_calls") or []
        if row["role"] == "assistant" and calls:
            ids = [c.get("id") for c in calls]
            j = i + 1
            while j < len(history) and history[j]["role"] == "tool":
                j += 1
            answered = sorted(
                (r.get("meta") or {}).get("tool_call_id") or "" for r in history[i + 1 : j]
            )
            # Exactly one result per call: anything else (a missing, repeated or foreign
            # result) cannot be sent as a tool exchange, so all of it becomes notes.
            if answered == sorted(str(c) for c in ids):
                units.append(list(history[i:j]))
            else:
                units.extend([[_as_note(r)] for r in history[i:j]])
            i = j
            continue
        units.append([_as_note(row)] if row["role"] == "tool" else [row])
        i += 1
    return units


def _as_note(row: dict[str, Any]) -> dict[str, Any]:
    meta = {
        k: v for k, v in (row.get("meta") or {}).items() if k not in ("tool_calls", "tool_call_id")
    }
    return {**row, "meta": meta}


def select_recent(
    units: list[list[dict[str, Any]]],
    budget: int,
    cost: Cost,
) -> list[list[dict[str, Any]]]:
    """Keep the newest units that fit in `budget`, in chronological order."""
    kept: list[list[dict[str, Any]]] = []
    used = 0
    for unit in reversed(units):
        unit_cost = sum(cost(r) for r in unit)
        if used + unit_cost > budget:
            break
        kept.append(unit)
        used += unit_cost
    kept.reverse()
    return kept


_ERROR_WORDS = re.compile(
    r"error|exception|traceback|failed|ошибк|исключени|сбой|не удалось", re.IGNORECASE
)
_DECISION_WORDS = re.compile(
    r"decid|decision|agreed|we chose|решени|решили|выбрали|договорились", re.IGNORECASE
)


def score_unit(unit: Unit, position: int, total: int) -> float:
    """Score a unit as seed 002 does: recency 0-0.4, tool results +0.2, errors +0.3,
    decisions +0.2 (the best row of the unit counts)."""
    best = 0.0
    for row in unit:
        score = 0.0
        if row["role"] == "tool" or (row.get("meta") or {}).get("tool_calls"):
            score += 0.2
        content = row.get("content") or ""
        if _ERROR_WORDS.search(content):
            score += 0.3
        if _DECISION_WORDS.search(content):
            score += 0.2
        best = max(best, score)
    return 0.4 * (position + 1) / max(1, total) + best


def select_scored(units: list[Unit], budget: int, cost: Cost, pinned: int = 2) -> list[Unit]:
    """Keep the best-scored units that fit in `budget`, in chronological order.

    The newest `pinned` units (normally the exchange the user is answering) come first
    whatever their score: a reply to "yes, do that" needs what "that" was. Then every
    unit the running summary does not hold yet (`summarized` false), newest first: the
    score only chooses among what the summary keeps anyway.
    """
    costs = [sum(cost(r) for r in unit) for unit in units]
    order = list(range(len(units) - 1, max(-1, len(units) - 1 - pinned), -1))
    unfolded = [
        i
        for i in range(len(units) - len(order) - 1, -1, -1)
        if any(r.get("summarized") is False for r in units[i])
    ]
    order += unfolded
    rest = sorted(
        (i for i in range(len(units)) if i not in order),
        key=lambda i: (score_unit(units[i], i, len(units)), i),
        reverse=True,
    )
    chosen: list[int] = []
    used = 0
    for i in order + rest:
        if used + costs[i] <= budget:
            chosen.append(i)
            used += costs[i]
    return [units[i] for i in sorted(chosen)]
