"""Graph factories for `langgraph dev` (LangGraph Studio); langgraph.json names them.

`make_graph` serves the conversation graph exactly as the bot runs it: its input is the
turn state AgentService prepares (the user's message already stored). `make_chat_graph`
puts one node in front that does that preparation, so a message can be typed in Studio:
input `{"user_id": 1, "text": "Привет"}`. Both read settings from the environment and
`.env`, use the configured database and model, and close their pool when the server is
done with the graph. The server brings its own checkpointer, so none is compiled in.
"""

# No `from __future__ import annotations`: the server reads the factories' annotations.
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from src.config import load_settings
from src.graph.conversation_state import ConversationState, turn_input
from src.graph.deps import GraphDeps
from src.graph.main_graph import build_graph
from src.graph.rights import Role
from src.services.agent_service import stamp
from src.services.factory import make_deps
from src.storage.migrations import migrate
from src.storage.pg_client import open_pool_from_settings

STUDIO_USER_ID = 1


class StudioInput(TypedDict, total=False):
    """What Studio's input form asks for."""

    user_id: int
    """Whose memory the turn uses (a Telegram user id); default 1."""
    text: str
    """The message, as a user would type it to the bot."""


class StudioState(ConversationState, total=False):
    """The turn state plus the typed text."""

    text: str
    """The message as typed, before it is stamped and stored."""


def build_chat_graph(deps: GraphDeps) -> Any:
    """Return a graph that stores a typed message, then runs the conversation graph."""

    async def store_input(state: StudioState) -> dict[str, Any]:
        """Store the message as AgentService does and prepare the turn's state."""
        user_id = state.get("user_id") or STUDIO_USER_ID
        await deps.users.get_or_create(user_id)
        conversation_id = await deps.conversations.get_or_create_conversation(user_id)
        row = await deps.conversations.append_message(
            conversation_id, "user", stamp(state.get("text") or "", deps.clock(), deps.settings)
        )
        return turn_input(user_id, str(conversation_id), row, role=Role.TERMINAL)

    builder = StateGraph(StudioState, input_schema=StudioInput)
    builder.add_node("store_input", store_input)
    builder.add_node("turn", build_graph(deps))
    builder.add_edge(START, "store_input")
    builder.add_edge("store_input", "turn")
    builder.add_edge("turn", END)
    return builder.compile(name="tgagent_chat")


@asynccontextmanager
async def _deps() -> AsyncIterator[GraphDeps]:
    # In a thread: reading `.env` blocks, and the dev server refuses blocking calls on its
    # event loop (unless `langgraph dev --allow-blocking`).
    settings = await asyncio.to_thread(load_settings)
    pool = await open_pool_from_settings(settings)
    try:
        await migrate(pool)
        # Building the models' HTTP clients reads certificates: in a thread too.
        yield await asyncio.to_thread(make_deps, settings, pool)
    finally:
        await pool.close()


@asynccontextmanager
async def make_graph(config: RunnableConfig) -> AsyncIterator[Any]:
    """Yield the conversation graph over the configured database and model."""
    async with _deps() as deps:
        yield build_graph(deps)


@asynccontextmanager
async def make_chat_graph(config: RunnableConfig) -> AsyncIterator[Any]:
    """Yield the conversation graph behind a node that stores a typed message."""
    async with _deps() as deps:
        yield build_chat_graph(deps)
