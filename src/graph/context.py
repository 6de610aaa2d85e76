"""Assemble what the model sees: layered system prompt, numbered working memory, message.

Seed 002's layers each get a share of the input budget (the model's context limit minus
the reply budget) and never exceed it: the system prompt (`BUDGET_SYSTEM`), typed facts
(`BUDGET_FACTS`), previous conversations and the running summary (`BUDGET_SUMMARY`), and
working memory (`BUDGET_WORKING`). The base system prompt and the current message are
always sent, even on a budget too small for them; the optional layers go first.
Seed 003's `[i] Role: text` numbering exists only in this copy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from src.config import Settings
from src.graph import prompts
from src.graph.facts import facts_section, needs_objectivity
from src.graph.tokens import PER_MESSAGE_OVERHEAD, TokenCounter, count_messages, message_text

ROLE_LABELS = {"user": "User", "assistant": "Assistant", "tool": "Tool", "system": "System"}
# A model imitating the numbered thread may start its answer with "[7] Assistant:".
_ECHOED_PREFIX = re.compile(r"^\s*(\[\d+\]\s*)?(Assistant|Ассистент)\s*:\s*", re.IGNORECASE)
# Where a text may be cut: after a sentence's end, or at a line break (keyvalue summaries).
_SENTENCE_END = re.compile(r"[.!?…](?=\s)|\n")
_SPACE = re.compile(r"\s+")

Row = dict[str, Any]
Unit = list[Row]


def strip_echoed_prefix(text: str) -> str:
    """Remove a `[i] Assistant:` prefix the model copied from the thread."""
    match = _ECHOED_PREFIX.match(text)
    if match and (match.group(1) or match.group(2)):
        return text[match.end() :]
    return text


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


# A squash summary (seed 003) is stored as a system message; the model reads it as what
# it is, not as an instruction.
SUMMARY_LABEL = "Summary"


def is_summary(row: dict[str, Any]) -> bool:
    """Tell whether a stored message is an FRS squash summary."""
    return bool((row.get("meta") or {}).get("frs_summary"))


def _label(row: dict[str, Any], position: int, numbering: str) -> str:
    number = row.get("number") if numbering == "absolute" else position
    role = SUMMARY_LABEL if is_summary(row) else ROLE_LABELS.get(row["role"], row["role"].title())
    return f"[{number}] {role}: "


def render_row(row: dict[str, Any], label: str) -> BaseMessage:
    """Turn one stored message into the chat message the model reads."""
    meta = row.get("meta") or {}
    content = label + (row.get("content") or "")
    role = row["role"]
    if role == "user":
        return HumanMessage(content)
    if role == "assistant":
        calls = meta.get("tool_calls") or []
        return AIMessage(content, tool_calls=calls) if calls else AIMessage(content)
    if role == "tool" and meta.get("tool_call_id"):
        return ToolMessage(content, tool_call_id=meta["tool_call_id"], name=meta.get("name"))
    return SystemMessage(content)


# --- previous conversations and the running summary -------------------------------------


def when_local(value: Any, zone: ZoneInfo) -> str:
    """Render a stored time (datetime or ISO string) as `YYYY-MM-DD HH:MM` in `zone`."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, datetime):
        return value.astimezone(zone).strftime("%Y-%m-%d %H:%M")
    return str(value or "")


def compact_line(compact: Row, zone: ZoneInfo) -> str:
    """Render one session compact as a line: date, summary, topics, last action."""
    line = f"- {when_local(compact.get('created_at'), zone)}: {compact['summary'].strip()}"
    if compact.get("topics"):
        line += f" Topics: {', '.join(compact['topics'])}."
    if compact.get("last_action"):
        line += f" Last action: {compact['last_action']}."
    return line


def compacts_section(
    compacts: Sequence[Row], budget: int, counter: TokenCounter, zone: ZoneInfo
) -> str:
    """Return "Previous conversations" within `budget`: the newest that fit, oldest first."""
    header = prompts.PREVIOUS_CONVERSATIONS_HEADER
    left = budget - counter.count(header) - 1
    lines: list[str] = []
    for compact in compacts:  # newest first
        line = compact_line(compact, zone)
        if counter.count(line) + 1 > left:
            line = truncate_text(line, left - 1, counter)
        if not line:
            break
        lines.append(line)
        left -= counter.count(line) + 1
    if not lines:
        return ""
    text = header + "\n" + "\n".join(reversed(lines))
    while lines and counter.count(text) > budget:
        lines.pop()
        text = header + "\n" + "\n".join(reversed(lines))
    return text if lines else ""


def summary_section(summary: str, budget: int, counter: TokenCounter) -> str:
    """Return the running summary under its header, cut on a sentence to `budget`."""
    summary = (summary or "").strip()
    if not summary:
        return ""
    header = prompts.SUMMARY_HEADER
    text = truncate_text(summary, budget - counter.count(header) - 2, counter)
    return header + "\n" + text if text else ""


def system_sections(
    state: dict[str, Any], layers: Layers, counter: TokenCounter, settings: Settings
) -> dict[str, str]:
    """Return the system prompt's parts, each within its layer's budget.

    `summary` shares BUDGET_SUMMARY with `previous`: previous conversations get at most
    a third of it, the running summary the rest.
    """
    objective = needs_objectivity(state.get("input_text", ""), settings.facts_objective_mode)
    current = state.get("conversation_id")
    compacts = [
        c
        for c in state.get("compacts") or []
        if str(c.get("conversation_id") or "") != str(current or "-")
    ][: settings.compacts_in_prompt]
    previous = compacts_section(compacts, layers.summary // 3, counter, settings.zone)
    used = counter.count(previous) + 2 if previous else 0
    return {
        "base": prompts.SYSTEM_PROMPT,
        "facts": facts_section(
            state.get("facts") or [],
            layers.facts,
            counter,
            objective,
            settings.max_facts_in_prompt,
        ),
        "previous": previous,
        "summary": summary_section(state.get("summary") or "", layers.summary - used, counter),
    }


def system_prompt(
    state: dict[str, Any], layers: Layers, counter: TokenCounter, settings: Settings
) -> str:
    """Return the system prompt with facts, previous conversations and summary layers."""
    return "\n\n".join(p for p in system_sections(state, layers, counter, settings).values() if p)


# --- working memory -----------------------------------------------------------------------


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
    cost: Any,
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


def select_scored(units: list[Unit], budget: int, cost: Any, pinned: int = 2) -> list[Unit]:
    """Keep the best-scored units that fit in `budget`, in chronological order.

    The newest `pinned` units (normally the exchange the user is answering) come first
    whatever their score: a reply to "yes, do that" needs what "that" was.
    """
    costs = [sum(cost(r) for r in unit) for unit in units]
    order = list(range(len(units) - 1, max(-1, len(units) - 1 - pinned), -1))
    rest = sorted(
        range(len(units) - len(order)),
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


def row_tokens(row: Row, counter: TokenCounter, label: str = "[9999] Assistant: ") -> int:
    """Return what one stored message costs in working memory, its label included."""
    return counter.count(message_text(render_row(row, label))) + PER_MESSAGE_OVERHEAD


def _render(
    system: SystemMessage, units: list[Unit], current: Row, numbering: str
) -> tuple[list[BaseMessage], list[Row]]:
    rows = [row for unit in units for row in unit] + [current]
    messages: list[BaseMessage] = [system]
    snapshot: list[Row] = []
    for position, row in enumerate(rows, start=1):
        messages.append(render_row(row, _label(row, position, numbering)))
        snapshot.append({"id": row["id"], "number": row["number"], "role": row["role"]})
    return messages, snapshot


def build_context(
    state: dict[str, Any], settings: Settings, counter: TokenCounter, reserve: int = 0
) -> tuple[list[BaseMessage], list[dict[str, Any]], int]:
    """Return the model's messages, the numbered thread snapshot, and their token count.

    The snapshot lists, per position, the stored message's id, number and role: the
    model's positions (seed 003) resolve against it. `reserve` tokens of the input budget
    are left for what is sent besides the messages: the tools' schemas.
    """
    layers = Layers.for_model(settings, settings.llm_model, reserve)
    numbering = settings.frs_numbering
    current: Row = {
        "id": state.get("input_message_id"),
        "number": state.get("input_number"),
        "role": "user",
        "content": state["input_text"],
        "meta": None,
    }
    history = state.get("history") or []
    widest = f"[{max([len(history) + 1, *(r.get('number') or 0 for r in history)])}] Assistant: "

    def cost(row: Row) -> int:
        return row_tokens(row, counter, widest)

    system = SystemMessage(system_prompt(state, layers, counter, settings))
    fixed = count_messages([system], counter) + cost(current)
    if fixed > layers.total:
        # Too small a budget for the optional layers: keep only what must be sent.
        system = SystemMessage(prompts.SYSTEM_PROMPT)
        fixed = count_messages([system], counter) + cost(current)
    budget = max(0, min(layers.working, layers.total - fixed))
    select = select_scored if settings.context_selection == "scored" else select_recent
    units = select(group_units(history), budget, cost)
    while True:
        messages, snapshot = _render(system, units, current, numbering)
        working = count_messages(messages[1:-1], counter)
        tokens = count_messages(messages, counter)
        # Counting a whole message may differ from the estimate: drop the oldest unit.
        if not units or (working <= budget and tokens <= layers.total):
            return messages, snapshot, tokens
        units = units[1:]


def reply_text(message: BaseMessage) -> str:
    """Return the user-facing text of a model answer."""
    return strip_echoed_prefix(message.text).strip()
