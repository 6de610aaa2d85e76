"""One stored message as the model reads it: its label, chat message, cost and transcript line.

Seed 003's `[i] Role: text` numbering exists only in the copy sent to the chat model.
Summarizer, fact extraction and session compacts read messages as `[role]: text` lines.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from src.graph.context.budget import truncate_text
from src.graph.timestamps import STAMP
from src.graph.tokens import PER_MESSAGE_OVERHEAD, TokenCounter, message_text

Row = dict[str, Any]

ROLE_LABELS = {"user": "User", "assistant": "Assistant", "tool": "Tool", "system": "System"}
# A squash summary (seed 003) is the model's own text standing where the run it replaced
# stood; it is labelled as what it is.
SUMMARY_LABEL = "Summary"
# The widest label working memory can carry: what budgets assume for every message.
WIDEST_LABEL = "[9999] Assistant: "
# What marks an MCP tool's words in a result (src/graph/mcp/tools.py: `wrap`).
OUTSIDE_MARK = "<tool_output "
# A reply's meta key: the MCP tools whose output the turn's model read before writing it
# (what it says may come from them: search and the memory models say so).
RELAYS = "relays"
# Appended, for the model, to a stored answer the user stopped midway (/stop).
INTERRUPTED_NOTE = "[interrupted by the user]"
# A model imitating the numbered thread may start its answer with "[7] Assistant:".
# A thread's label a model copied into its answer (small local models do): `[7] Assistant: `,
# `[8] User: `, or an unnumbered `Assistant: `.
_ECHOED_PREFIX = re.compile(
    r"^\s*(?:\[\d+\]\s*(?:Assistant|User|Ассистент|Пользователь)|Assistant|Ассистент)\s*:\s*",
    re.IGNORECASE,
)


def is_summary(row: Row) -> bool:
    """Tell whether a stored message is an FRS squash summary."""
    return bool((row.get("meta") or {}).get("frs_summary"))


def label(row: Row, position: int, numbering: str) -> str:
    """Return the `[i] Role: ` label of a message at `position` of the thread."""
    number = row.get("number") if numbering == "absolute" else position
    role = SUMMARY_LABEL if is_summary(row) else ROLE_LABELS.get(row["role"], row["role"].title())
    return f"[{number}] {role}: "


def render_row(row: Row, prefix: str) -> BaseMessage:
    """Turn one stored message into the chat message the model reads."""
    meta = row.get("meta") or {}
    content = prefix + (row.get("content") or "")
    role = row["role"]
    if role == "user":
        return HumanMessage(content)
    if role == "assistant":
        if meta.get("interrupted"):
            said = row.get("content")
            content = prefix + (f"{said}\n{INTERRUPTED_NOTE}" if said else INTERRUPTED_NOTE)
        calls = meta.get("tool_calls") or []
        return AIMessage(content, tool_calls=calls) if calls else AIMessage(content)
    if role == "tool" and meta.get("tool_call_id"):
        return ToolMessage(content, tool_call_id=meta["tool_call_id"], name=meta.get("name"))
    if role == "tool":
        # A result whose call has left the window: still data, labelled `Tool`, never a
        # system message (what a tool returns is no instruction).
        return HumanMessage(content)
    return SystemMessage(content)


def row_tokens(row: Row, counter: TokenCounter, prefix: str = WIDEST_LABEL) -> int:
    """Return what one stored message costs in the model's context, its label included.

    The one per-message cost everyone uses: context budgets, the summarizer's window,
    /compress and the FRS tools' sizes.
    """
    meta = row.get("meta") or {}
    if meta.get("tool_calls") or meta.get("interrupted"):
        return counter.count(message_text(render_row(row, prefix))) + PER_MESSAGE_OVERHEAD
    # What render_row makes of every other message: the label, then the text (counted
    # without making the message: the window is counted on every turn).
    return counter.count(prefix + (row.get("content") or "")) + PER_MESSAGE_OVERHEAD


def relayed_tools(records: list[dict[str, Any]]) -> list[str]:
    """Return the MCP tools whose output is among a turn's tool records (role, content,
    meta), in order, once each."""
    names: list[str] = []
    for record in records:
        if record["role"] == "tool" and OUTSIDE_MARK in (record.get("content") or ""):
            name = str((record.get("meta") or {}).get("name") or "a tool")
            if name not in names:
                names.append(name)
    return names


def relaying(row: Row) -> str:
    """Say where a reply's words may come from besides the assistant: "" or
    `relaying NAME's output` (the MCP tools its turn read, RELAYS)."""
    names = (row.get("meta") or {}).get(RELAYS) or []
    return f"relaying {', '.join(names)}'s output" if names else ""


def transcript_line(row: Row, cap: int, counter: TokenCounter) -> str:
    """Render one message as a `[role]: text` line for a memory model, cut to `cap` tokens.

    Tool calls are shown by name and arguments; an MCP tool's result only by its tool's
    name; a squash summary is labelled `summary`; a reply written after an MCP tool's
    output says so (`[assistant, relaying NAME's output]`).
    """
    text = (row.get("content") or "").strip()
    if row["role"] == "tool" and OUTSIDE_MARK in text:
        # An MCP tool's result is data from outside: the summary and the notes that end
        # up in the system prompt are never written from its words.
        name = (row.get("meta") or {}).get("name") or "a tool"
        return f"[tool]: ({name}'s output, {len(text)} characters, not shown)"
    calls = (row.get("meta") or {}).get("tool_calls") or []
    if calls:
        text += " " + ", ".join(f"{c.get('name')}({c.get('args')})" for c in calls)
    role = "summary" if is_summary(row) else row["role"]
    source = relaying(row)
    role = f"{role}, {source}" if source else role
    return f"[{role}]: {truncate_text(text.strip(), cap, counter)}"


def when_local(value: Any, zone: ZoneInfo) -> str:
    """Render a stored time (datetime or ISO string) as `YYYY-MM-DD HH:MM` in `zone`."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, datetime):
        return value.astimezone(zone).strftime("%Y-%m-%d %H:%M")
    return str(value or "")


def strip_echoed_prefix(text: str) -> str:
    """Remove what the model copied from the thread before its answer: a `[i] Role: `
    label and a message's `[Current time: …]` stamp, in any order, each as often as it
    was copied (a few times at most)."""
    for _ in range(4):
        cleaned = STAMP.sub("", _ECHOED_PREFIX.sub("", text, count=1).lstrip(), count=1)
        if cleaned == text:
            break
        text = cleaned
    return text


def reply_text(message: BaseMessage) -> str:
    """Return the user-facing text of a model answer."""
    return strip_echoed_prefix(message.text).strip()
