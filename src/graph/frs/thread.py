"""The numbered thread the FRS tools address (seed 003): positions, guard rails, rewrites.

A thread is the snapshot `build_context` stores in `state["thread"]`: per position, the
stored message's id, number and role, oldest first, the user's current message last.
Everything here is pure; the tools in `frs.tools` add the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, RemoveMessage, SystemMessage

from src.graph.context.render import ROLE_LABELS, SUMMARY_LABEL, is_summary, label

Thread = Sequence[dict[str, Any]]


def shown_keys(thread: Thread, numbering: str) -> list[int]:
    """Return what the model sees in front of each message: positions or numbers."""
    if numbering == "absolute":
        return [int(entry["number"]) for entry in thread]
    return list(range(1, len(thread) + 1))


def protected_from(thread: Thread) -> int:
    """Return the index of the first message that stays verbatim.

    That is the latest user message (during a turn: the one being answered) and whatever
    follows it; len(thread) if the thread has no user message.
    """
    for i in range(len(thread) - 1, -1, -1):
        if thread[i]["role"] == "user":
            return i
    return len(thread)


def describe_keys(keys: Sequence[int]) -> str:
    """Render keys compactly: 1, 2, 4-9."""
    parts: list[str] = []
    i = 0
    while i < len(keys):
        j = i
        while j + 1 < len(keys) and keys[j + 1] == keys[j] + 1:
            j += 1
        parts.append(str(keys[i]) if i == j else f"{keys[i]}-{keys[j]}")
        i = j + 1
    return ", ".join(parts) if parts else "none"


def _unit_boundary_split(thread: Thread, left: int) -> bool:
    """Tell whether cutting between index `left` and `left + 1` splits a tool exchange.

    Stored tool results always follow their calling assistant message (or a sibling
    result), so a tool message right after an assistant or tool message belongs to it.
    """
    if left < 0 or left + 1 >= len(thread):
        return False
    return thread[left + 1]["role"] == "tool" and thread[left]["role"] in ("assistant", "tool")


def check_span(thread: Thread, start: int, end: int, numbering: str) -> str | None:
    """Return why indices start..end (inclusive) cannot be compressed, or None if they can."""
    keys = shown_keys(thread, numbering)
    word = "numbers" if numbering == "absolute" else "positions"
    if start > end:
        return (
            f"Error: the range is reversed ({keys[start]} comes after {keys[end]}); "
            f"give `from` <= `to`."
        )
    limit = protected_from(thread)
    if end >= limit:
        allowed = describe_keys(keys[:limit])
        return (
            f"Error: {keys[limit]} is the user's latest message, which stays verbatim "
            f"(as does everything after it); you can compress {word} {allowed}."
        )
    if _unit_boundary_split(thread, start - 1):
        return (
            f"Error: {keys[start]} is a tool result whose call is at {keys[start - 1]}; a tool "
            f"call and its results are compressed together: start the range earlier."
        )
    if _unit_boundary_split(thread, end):
        return (
            f"Error: {keys[end]} is a tool call (or result) whose results continue at "
            f"{keys[end + 1]}; a tool call and its results are compressed together: "
            f"end the range later."
        )
    return None


def resolve_last(thread: Thread, count: int, numbering: str) -> tuple[int, int] | str:
    """Return the indices of the last `count` messages before the protected tail, or an error."""
    if count < 1:
        return f"Error: count must be at least 1, got {count}."
    limit = protected_from(thread)
    if count > limit:
        if limit == 0:
            return "Error: there is nothing before the user's latest message to compress."
        return (
            f"Error: only {limit} message(s) come before the user's latest message; "
            f"count must be between 1 and {limit}."
        )
    start, end = limit - count, limit - 1
    return check_span(thread, start, end, numbering) or (start, end)


def replace_span(
    thread: Thread, start: int, end: int, summary_row: dict[str, Any]
) -> list[dict[str, Any]]:
    """Return the thread with indices start..end replaced by the summary message."""
    entry = {"id": summary_row["id"], "number": summary_row["number"], "role": summary_row["role"]}
    return [*thread[:start], entry, *thread[end + 1 :]]


def summary_label(summary_row: dict[str, Any], position: int, numbering: str) -> str:
    """Return the label the summary message carries in the model's copy."""
    return label(summary_row, position, numbering)


def locate(messages: Sequence[BaseMessage], thread: Thread, numbering: str) -> int | None:
    """Return the index in `messages` where the numbered thread starts, or None.

    Every numbered message starts with `[key] `; the thread follows the system prompt.
    """
    keys = shown_keys(thread, numbering)
    if not keys:
        return None

    def fits(at: int) -> bool:
        if at + len(keys) > len(messages):
            return False
        for offset, key in enumerate(keys):
            message = messages[at + offset]
            content = message.content
            if message.id is None or not isinstance(content, str):
                return False
            if not content.startswith(f"[{key}] "):
                return False
        return True

    candidates = [1, *range(0, len(messages))]
    return next((at for at in candidates if fits(at)), None)


def rewrite_messages(
    messages: Sequence[BaseMessage],
    thread: Thread,
    start: int,
    end: int,
    summary_row: dict[str, Any],
    numbering: str,
) -> list[BaseMessage]:
    """Return the updates that make this turn's model copy match the compressed thread.

    The first replaced message becomes the summary (same id, so it stays in place), the
    rest are removed, and in relative mode the messages after the range are renumbered.
    Empty if the copy cannot be matched to the thread (then only the next turn changes).
    """
    at = locate(messages, thread, numbering)
    if at is None:
        return []
    old = list(messages[at : at + len(thread)])
    label = summary_label(summary_row, start + 1, numbering)
    updates: list[BaseMessage] = [
        SystemMessage(label + str(summary_row["content"]), id=old[start].id)
    ]
    updates += [RemoveMessage(id=str(m.id)) for m in old[start + 1 : end + 1]]
    shift = end - start
    if numbering == "relative" and shift:
        for index in range(end + 1, len(old)):
            message = old[index]
            text = str(message.content)
            prefix = f"[{index + 1}] "
            renumbered = f"[{index + 1 - shift}] " + text[len(prefix) :]
            updates.append(message.model_copy(update={"content": renumbered}))
    return updates


def role_label(row: dict[str, Any]) -> str:
    """Return the role word shown for a stored message."""
    if is_summary(row):
        return SUMMARY_LABEL
    return ROLE_LABELS.get(row["role"], str(row["role"]).title())
