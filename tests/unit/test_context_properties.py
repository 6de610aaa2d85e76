"""Property tests of the context builder over random histories, layers and budgets."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from src.config import Settings
from src.graph import prompts
from src.graph.context.assemble import build_context
from src.graph.context.budget import Layers
from src.graph.context.sections import system_sections
from src.graph.tokens import ApproxCounter, count_messages

COUNTER = ApproxCounter()
WORDS = ["привет", "мир", "hello", "world", "ошибка", "решили", "error", "42", "—", "!", "\n"]
text = st.lists(st.sampled_from(WORDS), max_size=150).map(" ".join)
short = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random stored history: plain messages, tool exchanges (some broken), notes."""
    rows: list[dict[str, Any]] = []
    calls = 0

    def add(role: str, content: str, meta: dict[str, Any] | None = None) -> None:
        n = len(rows) + 1
        rows.append({"id": n, "number": n, "role": role, "content": content, "meta": meta})

    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["user", "assistant", "system", "tools", "orphan"]))
        if kind == "tools":
            n = draw(st.integers(1, 3))
            ids = [f"call{calls + i}" for i in range(n)]
            calls += n
            specs = [{"id": i, "name": "search_history", "args": {"query": "x"}} for i in ids]
            add("assistant", draw(text), {"tool_calls": specs})
            answered = ids if draw(st.booleans()) else ids[: draw(st.integers(0, n))]
            for call_id in answered:
                add("tool", draw(text), {"tool_call_id": call_id, "name": "search_history"})
        elif kind == "orphan":
            add("tool", draw(text), {"tool_call_id": "lost", "name": "search_history"})
        else:
            add(kind, draw(text))
    return rows


facts = st.lists(
    st.fixed_dictionaries(
        {
            "key": short,
            "value": text,
            "type": st.sampled_from(["fact", "preference", "hypothesis", "constraint"]),
            "importance": st.integers(1, 10),
        }
    ),
    max_size=8,
)
compacts = st.lists(
    st.fixed_dictionaries(
        {
            "conversation_id": st.uuids().map(str),
            "created_at": st.just("2025-01-01T10:00:00+00:00"),
            "summary": text,
            "topics": st.lists(short, max_size=3),
            "last_action": short,
        }
    ),
    max_size=5,
)


@st.composite
def configs(draw: st.DrawFn) -> Settings:
    limit = draw(st.integers(512, 12_000))
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        default_context_limit=limit,
        llm_max_output_tokens=draw(st.integers(16, limit // 2)),
        budget_system=draw(st.floats(0.05, 0.3)),
        budget_facts=draw(st.floats(0.0, 0.3)),
        budget_summary=draw(st.floats(0.0, 0.3)),
        budget_working=draw(st.floats(0.1, 0.8)),
        context_selection=draw(st.sampled_from(["recent", "scored"])),
        frs_numbering=draw(st.sampled_from(["relative", "absolute"])),
        facts_objective_mode=draw(st.sampled_from(["auto", "always", "never"])),
        compacts_in_prompt=draw(st.integers(0, 5)),
    )


def assert_tool_pairs_intact(messages: list[BaseMessage]) -> None:
    """Every tool call is followed by all its results; every result follows its call."""
    i = 0
    while i < len(messages):
        message = messages[i]
        assert not isinstance(message, ToolMessage), f"result without its call at {i}"
        if isinstance(message, AIMessage) and message.tool_calls:
            ids = {c["id"] for c in message.tool_calls}
            results = []
            while i + 1 < len(messages) and isinstance(messages[i + 1], ToolMessage):
                i += 1
                results.append(messages[i])
            assert {r.tool_call_id for r in results} == ids
        i += 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=histories(),
    config=configs(),
    current=text.filter(bool),
    summary=text,
    fact_rows=facts,
    compact_rows=compacts,
    reserve=st.integers(0, 800),
)
def test_context_invariants(
    history: list[dict[str, Any]],
    config: Settings,
    current: str,
    summary: str,
    fact_rows: list[dict[str, Any]],
    compact_rows: list[dict[str, Any]],
    reserve: int,
) -> None:
    state = {
        "conversation_id": "c",
        "input_text": current,
        "input_message_id": 10_000,
        "input_number": 10_000,
        "history": history,
        "summary": summary,
        "facts": fact_rows,
        "compacts": compact_rows,
    }
    messages, snapshot, tokens = build_context(state, config, COUNTER, reserve)
    layers = Layers.for_model(config, config.llm_model, reserve)

    # The system prompt and the current message are always there, first and last.
    assert isinstance(messages[0], SystemMessage)
    assert messages[0].text.startswith(prompts.SYSTEM_PROMPT)
    assert isinstance(messages[-1], HumanMessage) and current in messages[-1].text
    assert snapshot[-1]["id"] == 10_000 and len(snapshot) == len(messages) - 1

    # The budget is never exceeded, unless the two messages that must go cannot fit.
    assert tokens == count_messages(messages, COUNTER)
    label = "[1] User: " if config.frs_numbering == "relative" else "[10000] User: "
    must = [SystemMessage(prompts.SYSTEM_PROMPT), HumanMessage(label + current)]
    if count_messages(must, COUNTER) <= layers.total:
        assert tokens <= layers.total
        assert count_messages(messages[1:-1], COUNTER) <= layers.working
    else:
        assert len(messages) == 2

    # Each layer of the system prompt stays within its own budget.
    sections = system_sections(state, layers, COUNTER, config)
    assert COUNTER.count(sections["facts"]) + COUNTER.count(sections["soft"]) <= layers.facts
    summary_layer = sections["previous"] + "\n\n" + sections["summary"]
    assert COUNTER.count(summary_layer.strip()) <= layers.summary + 1

    # Chronological order, only stored rows, and tool exchanges never split.
    ids = [r["id"] for r in snapshot[:-1]]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert set(ids) <= {r["id"] for r in history}
    assert_tool_pairs_intact(messages)
