"""Tools the model can call. The user's identity comes from the graph state, never from
the model's arguments: every tool reads `user_id` from the injected state."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import InjectedState

from src.graph.deps import GraphDeps


def _when(value: Any, deps: GraphDeps) -> str:
    if isinstance(value, datetime):
        return value.astimezone(deps.settings.zone).strftime("%Y-%m-%d %H:%M")
    return str(value or "")


def format_compacts(rows: list[dict[str, Any]], deps: GraphDeps) -> str:
    """Render session compacts as the model reads them, oldest first."""
    if not rows:
        return "No previous conversations are remembered."
    lines = []
    for row in reversed(rows):
        topics = ", ".join(row.get("topics") or [])
        line = f"- {_when(row['created_at'], deps)}: {row['summary']}"
        if topics:
            line += f" Topics: {topics}."
        if row.get("last_action"):
            line += f" Last action: {row['last_action']}."
        lines.append(line)
    return "Previous conversations:\n" + "\n".join(lines)


def make_memory_tools(deps: GraphDeps) -> list[BaseTool]:
    """Build the memory tools bound to the injected repositories."""

    @tool
    async def recall_previous_conversations(
        state: Annotated[dict[str, Any], InjectedState],
    ) -> str:
        """Recall short summaries of the user's previous conversations with you.

        Use it when the user asks what you talked about before, or refers to an earlier
        conversation that is not in the current one."""
        rows = await deps.memory.list_compacts(state["user_id"], deps.settings.max_compacts)
        return format_compacts(rows, deps)

    @tool
    async def search_history(
        query: str,
        state: Annotated[dict[str, Any], InjectedState],
        limit: int = 10,
    ) -> str:
        """Search everything the user and you said in stored conversations, older parts
        included, and return matching messages with their dates, newest first.

        Args:
            query: words to look for.
            limit: how many messages to return at most (1-50).
        """
        rows = await deps.memory.search_messages(state["user_id"], query, limit)
        if not rows:
            return f"Nothing found for {query!r}."
        lines = [
            f"- {_when(r['created_at'], deps)} {r['role']}: {r['content'][:500]}" for r in rows
        ]
        return f"Found {len(rows)} message(s) for {query!r}:\n" + "\n".join(lines)

    return [recall_previous_conversations, search_history]
