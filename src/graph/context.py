"""Assemble what the model sees: layered system prompt, numbered working memory, message.

Seed 002's layers each get a share of the input budget (the model's context limit minus
the reply budget); seed 003's `[i] Role: text` numbering exists only in this copy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from src.config import Settings
from src.graph import prompts
from src.graph.tokens import PER_MESSAGE_OVERHEAD, TokenCounter, count_messages

ROLE_LABELS = {"user": "User", "assistant": "Assistant", "tool": "Tool", "system": "System"}
# A model imitating the numbered thread may start its answer with "[7] Assistant:".
_ECHOED_PREFIX = re.compile(r"^\s*(\[\d+\]\s*)?(Assistant|Ассистент)\s*:\s*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")


def strip_echoed_prefix(text: str) -> str:
    """Remove a `[i] Assistant:` prefix the model copied from the thread."""
    match = _ECHOED_PREFIX.match(text)
    if match and (match.group(1) or match.group(2)):
        return text[match.end() :]
    return text


def truncate_text(text: str, budget: int, counter: TokenCounter) -> str:
    """Cut `text` to `budget` tokens on a sentence boundary (or a word, if one sentence)."""
    if counter.count(text) <= budget:
        return text
    if budget <= 0:
        return ""
    kept: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        if counter.count(" ".join([*kept, sentence])) > budget:
            break
        kept.append(sentence)
    if kept:
        return " ".join(kept)
    words = text.split()
    while words and counter.count(" ".join(words) + " …") > budget:
        words = words[: max(0, len(words) * 3 // 4)]
    return " ".join(words) + " …" if words else ""


@dataclass
class Layers:
    """Token budgets of the context layers for one model."""

    total: int
    system: int
    facts: int
    summary: int
    working: int

    @classmethod
    def for_model(cls, settings: Settings, model: str) -> Layers:
        total = max(256, settings.context_limit(model) - settings.llm_max_output_tokens)
        return cls(
            total=total,
            system=int(total * settings.budget_system),
            facts=int(total * settings.budget_facts),
            summary=int(total * settings.budget_summary),
            working=int(total * settings.budget_working),
        )


def _label(row: dict[str, Any], position: int, numbering: str) -> str:
    number = row.get("number") if numbering == "absolute" else position
    return f"[{number}] {ROLE_LABELS.get(row['role'], row['role'].title())}: "


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


def group_units(history: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Group history into units: a tool-calling answer stays with all its results.

    Tool results whose call is outside the window, and calls missing a result, are
    turned into plain notes so that no request carries a broken tool exchange.
    """
    units: list[list[dict[str, Any]]] = []
    i = 0
    while i < len(history):
        row = history[i]
        calls = (row.get("meta") or {}).get("tool_calls") or []
        if row["role"] == "assistant" and calls:
            ids = {c.get("id") for c in calls}
            j = i + 1
            while j < len(history) and history[j]["role"] == "tool":
                j += 1
            results = history[i + 1 : j]
            if ids <= {(r.get("meta") or {}).get("tool_call_id") for r in results}:
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


def system_prompt(
    state: dict[str, Any], layers: Layers, counter: TokenCounter, settings: Settings
) -> str:
    """Return the system prompt with facts, previous conversations and summary layers."""
    parts = [prompts.SYSTEM_PROMPT]
    facts = state.get("facts") or []
    hard = [f for f in facts if f["type"] in ("fact", "constraint")]
    soft = [f for f in facts if f["type"] in ("preference", "hypothesis")]
    budget = layers.facts
    for header, group in ((prompts.FACTS_HEADER, hard), (prompts.PREFERENCES_HEADER, soft)):
        lines: list[str] = []
        for fact in group[: settings.max_facts_in_prompt]:
            tag = "" if fact["type"] == "fact" else f" ({fact['type']})"
            line = f"- {fact['key']}: {fact['value']}{tag}"
            cost = counter.count(line) + 1
            if cost > budget:
                break
            budget -= cost
            lines.append(line)
        if lines:
            parts.append(header + "\n" + "\n".join(lines))
    compacts = (state.get("compacts") or [])[: settings.compacts_in_prompt]
    if compacts:
        blocks = [
            f"- {c.get('created_at', '')}: {c['summary']}"
            + (f" (topics: {', '.join(c['topics'])})" if c.get("topics") else "")
            for c in reversed(compacts)
        ]
        text = truncate_text("\n".join(blocks), layers.system, counter)
        if text:
            parts.append(prompts.PREVIOUS_CONVERSATIONS_HEADER + "\n" + text)
    summary = (state.get("summary") or "").strip()
    if summary:
        text = truncate_text(summary, layers.summary, counter)
        if text:
            parts.append(prompts.SUMMARY_HEADER + "\n" + text)
    return "\n\n".join(parts)


def build_context(
    state: dict[str, Any], settings: Settings, counter: TokenCounter
) -> tuple[list[BaseMessage], list[dict[str, Any]], int]:
    """Return the model's messages, the numbered thread snapshot, and their token count.

    The snapshot lists, per position, the stored message's id, number and role: the
    model's positions (seed 003) resolve against it.
    """
    layers = Layers.for_model(settings, settings.llm_model)
    numbering = settings.frs_numbering
    system = SystemMessage(system_prompt(state, layers, counter, settings))
    current_row = {
        "id": state.get("input_message_id"),
        "number": state.get("input_number"),
        "role": "user",
        "content": state["input_text"],
        "meta": None,
    }

    def cost(row: dict[str, Any]) -> int:
        # The longest label ("[9999] Assistant: ") costs about 6 tokens.
        text = row.get("content") or ""
        calls = (row.get("meta") or {}).get("tool_calls")
        return counter.count(text + (str(calls) if calls else "")) + PER_MESSAGE_OVERHEAD + 6

    fixed = count_messages([system], counter) + cost(current_row)
    budget = min(layers.working, layers.total - fixed)
    units = select_recent(group_units(state.get("history") or []), budget, cost)
    rows = [row for unit in units for row in unit] + [current_row]
    messages: list[BaseMessage] = [system]
    snapshot: list[dict[str, Any]] = []
    for position, row in enumerate(rows, start=1):
        messages.append(render_row(row, _label(row, position, numbering)))
        snapshot.append({"id": row["id"], "number": row["number"], "role": row["role"]})
    return messages, snapshot, count_messages(messages, counter)


def reply_text(message: BaseMessage) -> str:
    """Return the user-facing text of a model answer."""
    return strip_echoed_prefix(message.text).strip()
