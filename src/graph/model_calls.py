"""What each model call is for and whose it is: the run metadata usage is recorded by.

A turn's graph config carries `owner_id`, `conversation_id` and `turn_id` in its
metadata; LangChain hands a run's metadata down to every model call made inside it, and
LangGraph adds the node's name (`langgraph_node`), which says what the call is for.
Calls outside the turn graph say it all themselves with `call_config`.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config

PURPOSES = (
    "reply",
    "summary",
    "facts",
    "compact",
    "reminder",
    "compress",
    "describe",
    "embedding",
    "transcription",
)
# The turn graph's nodes that call models (src/graph/main_graph.py).
NODE_PURPOSES = {"agent": "reply", "summarize": "summary", "extract_facts": "facts"}


def call_config(
    purpose: str,
    owner_id: int | None = None,
    conversation_id: uuid.UUID | str | None = None,
    sender_id: int | None = None,
) -> RunnableConfig:
    """Return the config of a model call outside the turn graph: what for, and whose
    (`sender_id`: a group message's sender, whose budgets count it too)."""
    metadata: dict[str, Any] = {"purpose": purpose}
    if owner_id is not None:
        metadata["owner_id"] = owner_id
    if sender_id is not None and sender_id != owner_id:
        metadata["sender_id"] = sender_id
    if conversation_id is not None:
        metadata["conversation_id"] = str(conversation_id)
    return {"metadata": metadata}


def turn_metadata(
    owner_id: int, conversation_id: uuid.UUID | str, sender_id: int | None = None
) -> dict[str, Any]:
    """Return the metadata of one turn's graph run (a fresh turn id groups its calls);
    `sender_id`: who wrote a group turn's message (their budgets count its calls too)."""
    metadata: dict[str, Any] = {
        "owner_id": owner_id,
        "conversation_id": str(conversation_id),
        "turn_id": str(uuid.uuid4()),
    }
    if sender_id is not None and sender_id != owner_id:
        metadata["sender_id"] = sender_id
    return metadata


class OverBudget(Exception):
    """A turn's model call was not made: its owner or sender is over budget."""

    def __init__(self, resets_at: datetime) -> None:
        super().__init__(f"over budget until {resets_at.isoformat()}")
        self.resets_at = resets_at


def purpose_of(metadata: dict[str, Any] | None) -> str:
    """Return what a call is for: said explicitly, else by its graph node, else a reply."""
    metadata = metadata or {}
    said = metadata.get("purpose")
    if said in PURPOSES:
        return str(said)
    return NODE_PURPOSES.get(str(metadata.get("langgraph_node")), "reply")


def ambient_metadata() -> dict[str, Any]:
    """Return the metadata of the run this code runs inside ({} outside any run).

    For calls that are not LangChain chat models (embeddings, transcriptions): a search
    query embedded by a tool of the turn graph belongs to that turn's owner.
    """
    config = var_child_runnable_config.get()
    return dict((config or {}).get("metadata") or {})
