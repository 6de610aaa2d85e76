"""FRS (seed 003) without a database: positions, guard rails, rewrites, the tools' schema."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from src.graph.context.render import label, render_row, strip_echoed_prefix
from src.graph.frs.thread import (
    check_span,
    describe_keys,
    locate,
    protected_from,
    replace_span,
    resolve_last,
    rewrite_messages,
    shown_keys,
)
from src.graph.frs.tools import make_frs_tools
from src.graph.main_graph import tool_error_message
from src.graph.tokens import ApproxCounter
from src.storage.squash_repo import SquashRepository
from tests.conftest import make_settings


def entry(i: int, role: str, number: int | None = None) -> dict[str, Any]:
    return {"id": 100 + i, "number": number if number is not None else i, "role": role}


# A, B, C, D with D the user's current message (seed 003's example).
SEED = [entry(1, "user"), entry(2, "assistant"), entry(3, "user"), entry(4, "user")]
# user, tool call, result, result, "Tools used", answer, current user message
TOOLS = [
    entry(1, "user"),
    entry(2, "assistant"),
    entry(3, "tool"),
    entry(4, "tool"),
    entry(5, "system"),
    entry(6, "assistant"),
    entry(7, "user"),
]


def test_keys_relative_and_absolute() -> None:
    gapped = [entry(1, "user", 1), entry(2, "system", 2), entry(3, "user", 4)]
    assert shown_keys(gapped, "relative") == [1, 2, 3]
    assert shown_keys(gapped, "absolute") == [1, 2, 4]
    assert describe_keys([1, 2, 4, 5, 6, 9]) == "1-2, 4-6, 9"
    assert describe_keys([]) == "none"


def test_latest_user_message_and_after_are_protected() -> None:
    assert protected_from(SEED) == 3
    assert protected_from(TOOLS) == 6
    assert protected_from([entry(1, "user"), entry(2, "assistant")]) == 0
    assert protected_from([entry(1, "system")]) == 1


def test_seed_range_is_allowed() -> None:
    assert check_span(SEED, 1, 2, "relative") is None
    assert replace_span(SEED, 1, 2, {"id": 9, "number": 2, "role": "system"}) == [
        SEED[0],
        {"id": 9, "number": 2, "role": "system"},
        SEED[3],
    ]


@pytest.mark.parametrize(
    ("start", "end", "needle"),
    [
        (2, 1, "reversed"),
        (1, 3, "user's latest message"),
        (3, 3, "user's latest message"),
        # indices into TOOLS: 1 is the call, 2 and 3 its results
        (2, 4, "start the range earlier"),  # starts at a result
        (3, 3, "start the range earlier"),  # the second result alone
        (1, 1, "end the range later"),  # the call without its results
        (1, 2, "end the range later"),  # ends at the first of two results
    ],
)
def test_guard_rails(start: int, end: int, needle: str) -> None:
    thread = TOOLS if "range" in needle else SEED
    problem = check_span(thread, start, end, "relative")
    assert problem is not None and problem.startswith("Error: ") and needle in problem


def test_a_whole_tool_exchange_can_go() -> None:
    assert check_span(TOOLS, 1, 3, "relative") is None
    assert check_span(TOOLS, 1, 4, "relative") is None
    assert check_span(TOOLS, 0, 5, "relative") is None


def test_an_orphan_result_at_the_window_start_can_go() -> None:
    thread = [entry(1, "tool"), entry(2, "system"), entry(3, "user")]
    assert check_span(thread, 0, 0, "relative") is None


def test_errors_name_what_the_model_sees() -> None:
    gapped = [entry(1, "user", 1), entry(2, "assistant", 5), entry(3, "user", 9)]
    problem = check_span(gapped, 0, 2, "absolute")
    assert problem is not None and "9 is the user's latest" in problem and "numbers 1, 5" in problem


def test_compress_last() -> None:
    assert resolve_last(SEED, 2, "relative") == (1, 2)
    assert resolve_last(SEED, 3, "relative") == (0, 2)
    for bad, needle in ((0, "at least 1"), (-2, "at least 1"), (4, "between 1 and 3")):
        result = resolve_last(SEED, bad, "relative")
        assert isinstance(result, str) and needle in result
    assert resolve_last(TOOLS, 1, "relative") == (5, 5)
    split = resolve_last(TOOLS, 4, "relative")  # would start at the first result
    assert isinstance(split, str) and "earlier" in split
    assert "nothing" in str(resolve_last([entry(1, "user")], 1, "relative"))


def rendered(thread: list[dict[str, Any]], numbering: str, texts: list[str]) -> list[Any]:
    """The model's copy as build_context makes it, ids assigned as add_messages does."""
    messages: list[Any] = [SystemMessage("system prompt", id="sys")]
    for position, (row, text) in enumerate(zip(thread, texts, strict=True), start=1):
        full = {**row, "content": text, "meta": None}
        message = render_row(full, label(full, position, numbering))
        message.id = f"m{row['id']}"
        messages.append(message)
    return messages


def test_rewrite_relative_renumbers_what_follows() -> None:
    messages = rendered(SEED, "relative", ["A", "B", "C", "D"])
    summary = {"id": 9, "number": 2, "role": "system", "content": "BC", "meta": {"frs_summary": 1}}
    updates = rewrite_messages(messages, SEED, 1, 2, summary, "relative")
    assert isinstance(updates[0], SystemMessage) and updates[0].id == "m102"
    assert updates[0].content == "[2] Summary: BC"
    assert isinstance(updates[1], RemoveMessage) and updates[1].id == "m103"
    assert isinstance(updates[2], HumanMessage) and updates[2].id == "m104"
    assert updates[2].content == "[3] User: D"
    assert len(updates) == 3


def test_rewrite_absolute_keeps_numbers() -> None:
    messages = rendered(SEED, "absolute", ["A", "B", "C", "D"])
    summary = {"id": 9, "number": 2, "role": "system", "content": "BC", "meta": {"frs_summary": 1}}
    updates = rewrite_messages(messages, SEED, 1, 2, summary, "absolute")
    assert [type(u).__name__ for u in updates] == ["SystemMessage", "RemoveMessage"]
    assert updates[0].content == "[2] Summary: BC"


def test_rewrite_gives_up_on_a_copy_it_cannot_match() -> None:
    messages = [SystemMessage("s", id="s"), HumanMessage("A", id="a"), HumanMessage("D", id="d")]
    assert locate(messages, SEED, "relative") is None
    assert rewrite_messages(messages, SEED, 1, 2, {"id": 1, "number": 2}, "relative") == []


def test_echoed_label_is_stripped_from_replies() -> None:
    assert strip_echoed_prefix("[7] Assistant: Привет") == "Привет"
    assert strip_echoed_prefix("Assistant: hi") == "hi"
    assert strip_echoed_prefix("[1] first item") == "[1] first item"
    # What small local models copy: the user's label and the time stamp, before the answer.
    stamp = "[Current time: 2026-11-28 10:00 Europe/Berlin] "
    assert strip_echoed_prefix(f"[8] User: {stamp}Hello!") == "Hello!"
    assert strip_echoed_prefix(f"[9] Assistant: {stamp}Hello!") == "Hello!"
    assert strip_echoed_prefix("[Текущее время: 2026-11-28 10:00] Привет") == "Привет"
    assert strip_echoed_prefix(f"{stamp}[9] Ассистент: Привет") == "Привет"
    assert strip_echoed_prefix("User: is how a chat log starts") == "User: is how a chat log starts"
    assert strip_echoed_prefix("[2] see the second item") == "[2] see the second item"


# --- the tools as the model is offered them -----------------------------------------------


def frs_tools(numbering: str = "relative") -> list[Any]:
    deps = SimpleNamespace(settings=make_settings(frs_numbering=numbering), counter=ApproxCounter())
    return make_frs_tools(deps, SquashRepository(None))  # type: ignore[arg-type]


def test_schema_offers_a_parameter_named_from() -> None:
    offered = {t.name: convert_to_openai_tool(t)["function"] for t in frs_tools()}
    assert set(offered) == {"view_thread", "compress_last", "compress_range"}
    params = offered["compress_range"]["parameters"]
    assert list(params["properties"]) == ["from", "to", "summary"]
    assert params["required"] == ["from", "to", "summary"]
    assert params["properties"]["from"]["type"] == "integer"
    last = offered["compress_last"]["parameters"]
    assert list(last["properties"]) == ["count", "summary"]
    assert offered["view_thread"]["parameters"]["properties"] == {}
    text = json.dumps(offered)
    assert "from_" not in text and "state" not in text and "tool_call_id" not in text


def test_absolute_mode_describes_numbers() -> None:
    offered = {t.name: convert_to_openai_tool(t)["function"] for t in frs_tools("absolute")}
    assert "numbers" in offered["compress_range"]["parameters"]["properties"]["from"]["description"]


class S(TypedDict, total=False):
    conversation_id: str
    role: str
    thread: list[dict[str, Any]]
    messages: Annotated[list[AnyMessage], add_messages]


async def run_calls(calls: list[dict[str, Any]]) -> list[ToolMessage]:
    builder = StateGraph(S)
    builder.add_node("tools", ToolNode(frs_tools(), handle_tool_errors=tool_error_message))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    state = {
        "conversation_id": "00000000-0000-0000-0000-000000000001",
        "role": "owner",
        "thread": SEED,
        "messages": [AIMessage("", tool_calls=calls)],
    }
    out = await builder.compile().ainvoke(state)
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


async def test_the_models_from_argument_is_accepted() -> None:
    # Guard rails answer before any database access, so the arguments' path is visible.
    calls = [
        {"name": "compress_range", "args": {"from": 3, "to": 2, "summary": "x"}, "id": "c1"},
        {"name": "compress_range", "args": {"from": "1", "to": 4, "summary": "x"}, "id": "c2"},
        {"name": "compress_range", "args": {"from_": 9, "to": 9, "summary": "x"}, "id": "c3"},
        {"name": "compress_range", "args": {"to": 2, "summary": "x"}, "id": "c4"},
        {"name": "compress_last", "args": {"count": 0, "summary": "x"}, "id": "c5"},
    ]
    results = {m.tool_call_id: m for m in await run_calls(calls)}
    assert "reversed" in results["c1"].text and results["c1"].status == "error"
    assert "user's latest message" in results["c2"].text
    assert "position 9 is out of range" in results["c3"].text
    assert results["c4"].text.startswith("Error: ") and "from" in results["c4"].text
    assert "at least 1" in results["c5"].text
    assert all(m.name in ("compress_range", "compress_last") for m in results.values())
