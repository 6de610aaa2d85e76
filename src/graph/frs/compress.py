"""The /compress command (seed 003): the model compresses the older part of the thread.

A small graph of its own (agent <-> tools) over the same FRS tools the conversation graph
offers, so the user's command and the model's own compressions share every guard rail.
Nothing of the run is stored except the squashes themselves.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from src.graph import prompts
from src.graph.context.budget import Layers
from src.graph.context.render import label, render_row, row_tokens
from src.graph.context.working import group_units, select_recent
from src.graph.deps import GraphDeps
from src.graph.frs.thread import protected_from
from src.graph.frs.tools import make_frs_tools
from src.graph.main_graph import tool_error_message
from src.graph.model_calls import call_config
from src.graph.tokens import count_messages
from src.graph.turn_context import with_ids

REQUESTED_BY = "user:/compress"
MAX_FOCUS_CHARS = 500


class CompressState(TypedDict, total=False):
    """State of one /compress run."""

    user_id: int
    """Owner of the memory, never set by the model."""
    role: str
    """The rights of who asked (src/graph/rights.py); the compress tools ask them."""
    conversation_id: str
    """The conversation being compressed."""
    requested_by: str
    """Who asked, for the squash log."""
    thread: list[dict[str, Any]]
    """The numbered thread the model sees (id, number, role per position)."""
    context: list[AnyMessage]
    """Instructions and the numbered thread (the compressions rewrite it)."""
    messages: Annotated[list[AnyMessage], add_messages]
    """The model's calls and tool results."""
    rounds: int
    """Model calls so far."""


@dataclass
class CompressOutcome:
    """What one /compress run did."""

    compressible: int = 0
    compressions: int = 0
    replaced: int = 0
    tokens_before: int = 0
    tokens_saved: int = 0


def compress_context(
    deps: GraphDeps, rows: list[dict[str, Any]], focus: str | None
) -> tuple[list[BaseMessage], list[dict[str, Any]], int]:
    """Return the model's messages for /compress, the thread snapshot, and its tokens."""
    settings, counter = deps.settings, deps.counter
    system = SystemMessage(prompts.COMPRESS_SYSTEM)
    focus = " ".join((focus or "").split())[:MAX_FOCUS_CHARS]
    request = HumanMessage(
        prompts.COMPRESS_REQUEST.format(
            focus=prompts.COMPRESS_FOCUS.format(focus=focus) if focus else ""
        )
    )

    def cost(row: dict[str, Any]) -> int:
        return row_tokens(row, counter)

    budget = Layers.for_model(settings, settings.llm_model).total - count_messages(
        [system, request], counter
    )
    units = select_recent(group_units(rows), budget, cost)
    flat = [row for unit in units for row in unit]
    numbered = [
        render_row(row, label(row, position, settings.frs_numbering))
        for position, row in enumerate(flat, start=1)
    ]
    thread = [{"id": r["id"], "number": r["number"], "role": r["role"]} for r in flat]
    return [system, *numbered, request], thread, count_messages(numbered, counter)


def build_compress_graph(deps: GraphDeps) -> Any:
    """Compile the /compress graph: agent <-> FRS tools, at most MAX_TOOL_ROUNDS rounds."""
    tools = make_frs_tools(deps)
    model = deps.chat_model.bind_tools(tools)
    cap = deps.settings.max_tool_rounds

    async def agent(state: CompressState) -> dict[str, Any]:
        answer = await model.ainvoke([*state["context"], *state.get("messages", [])])
        return {"messages": [answer], "rounds": state.get("rounds", 0) + 1}

    def route(state: CompressState) -> Literal["tools", "__end__"]:
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and last.tool_calls and state.get("rounds", 0) <= cap:
            return "tools"
        return "__end__"

    builder = StateGraph(CompressState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools, handle_tool_errors=tool_error_message))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(name="tgagent-compress")


async def run_compression(
    deps: GraphDeps,
    graph: Any,
    owner_id: int,
    conversation_id: uuid.UUID,
    rows: list[dict[str, Any]],
    focus: str | None,
    role: str = "owner",
) -> CompressOutcome:
    """Let the model compress the older part of `rows` (the working window), with the
    rights of who asked (`role`: src/graph/rights.py; the command checked them)."""
    messages, thread, tokens = compress_context(deps, rows, focus)
    outcome = CompressOutcome(compressible=protected_from(thread), tokens_before=tokens)
    if outcome.compressible < 2:
        return outcome
    state: dict[str, Any] = {
        "user_id": owner_id,
        "role": role,
        "conversation_id": str(conversation_id),
        "requested_by": REQUESTED_BY,
        "thread": thread,
        "context": with_ids(messages),
        "messages": [],
        "rounds": 0,
    }
    config = call_config("compress", owner_id, conversation_id)
    config["recursion_limit"] = 4 * deps.settings.max_tool_rounds + 8
    final = await graph.ainvoke(state, config)
    for message in final.get("messages", []):
        artifact = message.artifact if isinstance(message, ToolMessage) else None
        if isinstance(artifact, dict) and "squash_id" in artifact:
            outcome.compressions += 1
            outcome.replaced += int(artifact["replaced"])
            outcome.tokens_saved += int(artifact["tokens_saved"])
    return outcome
