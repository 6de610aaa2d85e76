"""Assemble what the model sees: system prompt with memory, numbered working memory, message.

Seed 002's layers each get a share of the input budget (the model's context limit minus
the reply budget) and never exceed it: the system prompt (`BUDGET_SYSTEM`), typed facts
(`BUDGET_FACTS`), previous conversations and the running summary (`BUDGET_SUMMARY`), and
working memory (`BUDGET_WORKING`). The base system prompt and the current message are
always sent, even on a budget too small for them; the optional layers go first.
"""

from __future__ import annotations

import logging
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from src.config import Settings
from src.graph import prompts
from src.graph.context.budget import Layers
from src.graph.context.render import Row, label, render_row, row_tokens
from src.graph.context.sections import (
    memory_section,
    summary_section,
    system_prompt,
    system_sections,
)
from src.graph.context.working import Unit, group_units, select_recent, select_scored
from src.graph.tokens import TokenCounter, count_messages

logger = logging.getLogger(__name__)


def _render(
    system: SystemMessage, units: list[Unit], current: Row, numbering: str, note: str
) -> tuple[list[BaseMessage], list[Row]]:
    rows = [row for unit in units for row in unit] + [current]
    messages: list[BaseMessage] = [system]
    snapshot: list[Row] = []
    for position, row in enumerate(rows, start=1):
        messages.append(render_row(row, label(row, position, numbering)))
        snapshot.append({"id": row["id"], "number": row["number"], "role": row["role"]})
    if note:
        messages[-1] = HumanMessage(f"{messages[-1].text}\n\n{note}")
    return messages, snapshot


def _squeezed(
    state: dict[str, Any], layers: Layers, counter: TokenCounter, current: int
) -> tuple[SystemMessage, str]:
    """Return the system prompt and the note after the message when the layers do not
    all fit beside the current message (a small model, a long message, many tools).

    The facts, previous conversations and preferences go. The running summary is what
    the conversation before the window was: it keeps the room left, its newest part
    first, and the model is told it was cut; nothing but the base prompt and the message
    only when not even that fits. Before, the summary went silently with the rest.
    """
    base = SystemMessage(prompts.SYSTEM_PROMPT)
    summary = state.get("summary") or ""
    notice = state.get("notice") or ""
    room = layers.total - count_messages([base], counter) - current
    room -= counter.count(notice) + 1 if notice else 0
    # The memory section's delimiters and the blank lines around it.
    room -= counter.count(memory_section(["x"])) + 2
    whole = summary_section(summary, layers.total, counter)
    if whole and counter.count(whole) <= room:
        return SystemMessage(f"{base.text}\n\n{memory_section([whole])}"), notice
    told = "\n\n".join(p for p in (notice, prompts.SUMMARY_CUT_NOTE) if p)
    room -= counter.count(prompts.SUMMARY_CUT_NOTE) + 2
    section = summary_section(summary, room, counter) if room > 0 else ""
    if not section:
        if whole:
            logger.error("no room for the running summary beside the current message")
        return base, ""
    logger.warning("the running summary is cut to the room beside the current message")
    return SystemMessage(f"{base.text}\n\n{memory_section([section])}"), told


def build_context(
    state: dict[str, Any], settings: Settings, counter: TokenCounter, reserve: int = 0
) -> tuple[list[BaseMessage], list[dict[str, Any]], int]:
    """Return the model's messages, the numbered thread snapshot, and their token count.

    The snapshot lists, per position, the stored message's id, number and role: the
    model's positions (seed 003) resolve against it. `reserve` tokens of the input budget
    are left for what is sent besides the messages: the tools' schemas.
    """
    layers = Layers.for_model(settings, state.get("model") or settings.llm_model, reserve)
    numbering = settings.frs_numbering
    current: Row = {
        "id": state.get("input_message_id"),
        "number": state.get("input_number"),
        "role": "user",
        "content": state["input_text"],
        "meta": None,
    }
    history = state.get("history") or []
    # Every message is costed with the widest label it could get: as many 9s as the
    # largest number has digits (digits cost by their count), so the label, and the
    # token counts cached for each labelled text, stay the same from turn to turn.
    largest = max([len(history) + 1, *(r.get("number") or 0 for r in history)])
    widest = f"[{'9' * len(str(largest))}] Assistant: "

    def cost(row: Row) -> int:
        return row_tokens(row, counter, widest)

    sections = system_sections(state, layers, counter, settings)
    system = SystemMessage(system_prompt(sections))
    # Preferences and hypotheses follow the current message: see `facts_sections`.
    note = memory_section([sections["soft"]])
    # The turn's own notice (the memory could not keep up) follows, outside the data.
    note = "\n\n".join(p for p in (note, state.get("notice") or "") if p)
    fixed = count_messages([system], counter) + cost(current)
    fixed += counter.count(note) + 1 if note else 0
    if fixed > layers.total:
        system, note = _squeezed(state, layers, counter, cost(current))
        fixed = count_messages([system], counter) + cost(current)
        fixed += counter.count(note) + 1 if note else 0
    budget = max(0, min(layers.working, layers.total - fixed))
    select = select_scored if settings.context_selection == "scored" else select_recent
    units = select(group_units(history), budget, cost)
    while True:
        messages, snapshot = _render(system, units, current, numbering, note)
        working = count_messages(messages[1:-1], counter)
        tokens = count_messages(messages, counter)
        # Counting a whole message may differ from the estimate: drop the oldest unit.
        if not units or (working <= budget and tokens <= layers.total):
            return messages, snapshot, tokens
        units = units[1:]
