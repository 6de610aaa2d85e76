"""Wire the conversation graph: build_context -> agent <-> tools -> log_tools (only after
tools ran) -> save_response -> summarize? -> extract_facts?"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode

from src.graph.conversation_state import ConversationState
from src.graph.deps import GraphDeps
from src.graph.frs.tools import make_frs_tools
from src.graph.memory_nodes import MemoryNodes
from src.graph.nodes import Nodes
from src.graph.time_tools import make_time_tools
from src.graph.tools import make_fact_tools, make_memory_tools

NODE_NAMES = (
    "build_context",
    "agent",
    "tools",
    "log_tools",
    "save_response",
    "summarize",
    "extract_facts",
)


def tool_error_message(error: Exception) -> str:
    """Turn any tool failure into a message the model can read and act on."""
    return f"Error: {error}"


def make_tools(deps: GraphDeps) -> list[BaseTool]:
    """Return every tool the model is offered."""
    return [
        *make_memory_tools(deps),
        *make_fact_tools(deps),
        *make_frs_tools(deps),
        *make_time_tools(deps),
        *(deps.mcp.tools if deps.mcp is not None else []),
    ]


def build_graph(deps: GraphDeps, checkpointer: BaseCheckpointSaver[Any] | None = None) -> Any:
    """Compile the conversation graph over the injected dependencies."""
    tools = make_tools(deps)
    nodes = Nodes(deps, tools)
    memory = MemoryNodes(deps, nodes.tool_tokens)
    builder = StateGraph(ConversationState)
    builder.add_node("build_context", nodes.build_context)
    builder.add_node("agent", nodes.agent)
    builder.add_node("tools", ToolNode(tools, handle_tool_errors=tool_error_message))
    builder.add_node("log_tools", nodes.log_tools)
    builder.add_node("save_response", nodes.save_response)
    builder.add_node("summarize", memory.summarize)
    builder.add_node("extract_facts", memory.extract_facts)

    builder.add_edge(START, "build_context")
    builder.add_edge("build_context", "agent")
    # agent says where it goes (tools, log_tools or save_response): Nodes.agent.
    builder.add_edge("tools", "agent")
    builder.add_edge("log_tools", "save_response")

    def facts_or_end(state: ConversationState) -> Literal["extract_facts", "__end__"]:
        return "extract_facts" if state.get("facts_due") else "__end__"

    def route_after_save(
        state: ConversationState,
    ) -> Literal["summarize", "extract_facts", "__end__"]:
        # build_context decided (`summary_due`, `facts_due`); otherwise skip the steps.
        # The summary first: it keeps the window's promise, facts can wait a turn.
        return "summarize" if state.get("summary_due") else facts_or_end(state)

    builder.add_conditional_edges(
        "save_response", route_after_save, ["summarize", "extract_facts", END]
    )
    builder.add_conditional_edges("summarize", facts_or_end, ["extract_facts", END])
    builder.add_edge("extract_facts", END)
    return builder.compile(checkpointer=checkpointer, name="tgagent")
