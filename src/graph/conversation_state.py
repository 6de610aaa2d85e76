"""The state one turn of the conversation graph carries from node to node."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages


class ConversationState(TypedDict, total=False):
    """State of one turn; the thread (conversation) keeps the last turn's values."""

    user_id: int
    """Owner of the memory: the Telegram user, or the group chat, never set by the model."""
    member_id: int
    """In a group, the member who wrote the turn's message (the update's `from.id`, never
    set by the model): their facts join the group's in the prompt, and the fact tools
    change theirs. 0 (or absent) in a private chat and for a group speaking as itself."""
    role: str
    """The rights of the person who wrote the turn (src/graph/rights.py: owner, admin,
    member, task, terminal), decided by the bot, never by the model: every tool with an
    effect asks it. Absent: a plain member's."""
    conversation_id: str
    """The conversation (and LangGraph thread) this turn belongs to."""
    language: str | None
    """The user's Telegram language code, for the bot's own texts."""
    zone: str
    """The owner's time zone (IANA name: their own, else TIMEZONE): the times tools and
    the prompt show are in it. Empty: TIMEZONE."""
    model: str
    """The chat model answering this turn: the owner's /model choice, else LLM_MODEL;
    FALLBACK_MODEL once that one failed with a server error or a timeout."""
    fallback: bool
    """Whether FALLBACK_MODEL took over this turn."""
    input_text: str
    """The user's message as stored: `[Текущее время: ...] text`."""
    input_message_id: int
    """Database id of the stored user message (already persisted before the graph ran)."""
    input_number: int
    """Absolute number of the stored user message in its conversation."""
    summary_due: bool
    """Whether the summarizer has work after the reply: enough unsummarized messages
    precede the window, or the token budget left stored messages out of the context."""
    facts_due: bool
    """Whether FACTS_EVERY user messages wait for fact extraction (after the reply)."""
    thread: list[dict[str, Any]]
    """The numbered thread the model saw: per position, the stored message's id, number
    and role (the current message last); tools resolve positions against it."""
    context: list[AnyMessage]
    """What the model sees before this turn's answers: system prompt, numbered history,
    current message. Written once by build_context (a compression rewrites it), stored
    once per turn (its checkpoint value refers to that write), emptied by save_response."""
    messages: Annotated[list[AnyMessage], add_messages]
    """This turn's model answers and tool results, after `context` (build_context
    empties it)."""
    tool_rounds: int
    """How many times the model asked for tools this turn."""
    tools_used: list[str]
    """Names of the tools run this turn, in first-use order."""
    tool_records: list[dict[str, Any]]
    """This turn's tool calls, results and `Tools used` note (role, content, meta), stored
    by save_response in the reply's transaction."""
    reply: str
    """The assistant's final answer to the user."""
    reply_stored: bool
    """Whether save_response stored the reply (False: a database error, sent unstored)."""
    stored_count: int
    """Messages this turn stored (the user message included), for seed 000's counter."""
    context_tokens: int
    """Tokens of the assembled context sent on the first model call."""
    usage: dict[str, int]
    """Tokens the model reported for this turn: input, output."""
    summarized: int
    """Messages the summarizer folded into the running summary this turn."""
    facts_learned: int
    """Facts stored by this turn's fact extraction."""


def turn_input(
    user_id: int,
    conversation_id: str,
    stored: dict[str, Any],
    language: str | None = None,
    model: str = "",
    member_id: int = 0,
    zone: str = "",
    role: str = "owner",
) -> dict[str, Any]:
    """Return a turn's input state for the stored user message `stored`.

    Every per-turn field is reset here: the thread keeps the previous turn's values.
    """
    return {
        "user_id": user_id,
        "member_id": member_id,
        "role": role,
        "conversation_id": conversation_id,
        "language": language,
        "zone": zone,
        "model": model,
        "fallback": False,
        "input_text": stored["content"],
        "input_message_id": stored["id"],
        "input_number": stored["number"],
        "tools_used": [],
        "tool_records": [],
        "reply": "",
        "stored_count": 1,
        "usage": {"input": 0, "output": 0},
        "summarized": 0,
        "facts_learned": 0,
    }
