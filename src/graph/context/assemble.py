"""Assemble what the model sees: system prompt with memory, numbered working memory, message.

Seed 002's layers each get a share of the input budget (the model's context limit minus
the reply budget) and never exceed it: the system prompt (`BUDGET_SYSTEM`), typed facts
(`BUDGET_FACTS`), previous conversations and the running summary (`BUDGET_SUMMARY`), and
working memory (`BUDGET_WORKING`). The base system prompt and the current message are
always sent, even on a budget too small for them; the optional layers go first.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from src.config import Settings
from src.graph import prompts
from src.graph.context.budget import Layers
from src.graph.context.render import Row, label, render_row, row_tokens
from src.graph.context.sections import memory_section, system_prompt, system_sections
from src.graph.context.working import Unit, group_units, select_recent, select_scored
from src.graph.tokens import TokenCounter, count_messages


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
        # Too small a budget for the optional layers: keep only what must be sent.
        system, note = SystemMessage(prompts.SYSTEM_PROMPT), ""
        fixed = count_messages([system], counter) + cost(current)
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
