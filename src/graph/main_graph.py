"""Wire the conversation graph: build_context -> agent <-> tools -> log_tools (only after
tools ran) -> save_response -> extract_facts? -> summarize?"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode

from src.graph.conversation_state import ConversationState
from src.graph.deps import GraphDeps
from src.graph.frs.tools import make_frs_tools
from src.graph.nodes import Nodes
from src.graph.tools import make_memory_tools

NODE_NAMES = (
    "build_context",
    "agent",
    "tools",
    "log_tools",
    "save_response",
    "extract_facts",
    "summarize",
)


def tool_error_message(error: Exception) -> str:
    """Turn any tool failure into a message the model can read and act on."""
    return f"Error: {error}"


def make_tools(deps: GraphDeps) -> list[BaseTool]:
    """Return every tool the model is offered."""
    return [*make_memory_tools(deps), *make_frs_tools(deps)]


def build_graph(deps: GraphDeps, checkpointer: BaseCheckpointSaver[Any] | None = None) -> Any:
    """Compile the conversation graph over the injected dependencies."""
    tools = make_tools(deps)
    nodes = Nodes(deps, tools)
    builder = StateGraph(ConversationState)
    builder.add_node("build_context", nodes.build_context)
    builder.add_node("agent", nodes.agent)
    builder.add_node("tools", ToolNode(tools, handle_tool_errors=tool_error_message))
    builder.add_node("log_tools", nodes.log_tools)
    builder.add_node("save_response", nodes.save_response)
    builder.add_node("extract_facts", nodes.extract_facts)
    builder.add_node("summarize", nodes.summarize)

    builder.add_edge(START, "build_context")
    builder.add_edge("build_context", "agent")
    # agent says where it goes (tools, log_tools or save_response): Nodes.agent.
    builder.add_edge("tools", "agent")
    builder.add_edge("log_tools", "save_response")

    def summarize_or_end(state: ConversationState) -> Literal["summarize", "__end__"]:
        # build_context decided (see `summary_due`); otherwise skip the step entirely.
        return "summarize" if state.get("summary_due") else "__end__"

    def route_after_save(
        state: ConversationState,
    ) -> Literal["extract_facts", "summarize", "__end__"]:
        # Facts first: both run after the reply, and MAX_STORAGE waits for both.
        return "extract_facts" if state.get("facts_due") else summarize_or_end(state)

    builder.add_conditional_edges(
        "save_response", route_after_save, ["extract_facts", "summarize", END]
    )
    builder.add_conditional_edges("extract_facts", summarize_or_end, ["summarize", END])
    builder.add_edge("summarize", END)
    return builder.compile(checkpointer=checkpointer, name="tgagent")
