"""Tools the model can call. The user's identity comes from the graph state, never from
the model's arguments: every tool reads `user_id` from the injected state."""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import InjectedState

from src.graph.context.render import when_local
from src.graph.context.sections import compact_line
from src.graph.deps import GraphDeps

# Characters of one found message shown to the model.
SEARCH_SNIPPET_CHARS = 500


def format_compacts(rows: list[dict[str, Any]], deps: GraphDeps) -> str:
    """Render session compacts as the model reads them, oldest first."""
    if not rows:
        return "No previous conversations are remembered."
    lines = [compact_line(row, deps.settings.zone) for row in reversed(rows)]
    return "Previous conversations (oldest first):\n" + "\n".join(lines)


def format_found(rows: list[dict[str, Any]], query: str, deps: GraphDeps) -> str:
    """Render found messages with their dates, best match first."""
    if not rows:
        return f"Nothing found for {query!r}."
    lines = []
    for row in rows:
        text = " ".join((row["content"] or "").split())
        if len(text) > SEARCH_SNIPPET_CHARS:
            text = text[:SEARCH_SNIPPET_CHARS] + " …"
        mark = " (compressed out of the conversation)" if row.get("squashed") else ""
        when = when_local(row["created_at"], deps.settings.zone)
        lines.append(f"- {when} {row['role']}{mark}: {text}")
    return f"Found {len(rows)} message(s) for {query!r}, best match first:\n" + "\n".join(lines)


def make_memory_tools(deps: GraphDeps) -> list[BaseTool]:
    """Build the memory tools bound to the injected repositories."""

    @tool
    async def recall_previous_conversations(
        state: Annotated[dict[str, Any], InjectedState],
    ) -> str:
        """Recall short summaries of the user's previous conversations with you: when,
        what about, topics and the last thing done.

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
        """Search everything the user and you said in stored conversations, including
        parts that are no longer in your context, and return matching messages with
        their dates, best match first.

        Args:
            query: words to look for (any of them matches; Russian and English word
                forms are matched, e.g. "кот" finds "коты").
            limit: how many messages to return at most (1-50).
        """
        rows = await deps.memory.search_messages(
            state["user_id"], query, limit, exclude_id=state.get("input_message_id")
        )
        return format_found(rows, query, deps)

    return [recall_previous_conversations, search_history]
