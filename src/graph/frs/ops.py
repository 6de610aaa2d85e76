"""What the FRS tools (seed 003) do: view the numbered thread, squash runs of it.

Positions (or, with FRS_NUMBERING=absolute, message numbers) resolve against the thread
snapshot in `state["thread"]`; the conversation comes from the state, never from the
model. A compression returns a `Command` that updates the snapshot and this turn's copy
of the context, so later calls in the same turn see the compressed thread. Every mistake
the model can make is answered with a tool error it can read, never an exception.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, cast

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph.message import add_messages
from langgraph.types import Command

from src.graph.context.render import row_tokens
from src.graph.deps import GraphDeps
from src.graph.frs.thread import (
    check_span,
    describe_keys,
    protected_from,
    replace_span,
    resolve_last,
    rewrite_messages,
    role_label,
    shown_keys,
)
from src.graph.memory.errors import log_failure
from src.graph.memory.facts import extract_pending
from src.storage.squash_repo import SquashConflict, SquashRepository

logger = logging.getLogger(__name__)

COMPRESSING = frozenset({"compress_last", "compress_range"})
PREVIEW_CHARS = 100


class FrsTools:
    """The three FRS tools over injected dependencies and the squash repository."""

    def __init__(self, deps: GraphDeps, squashes: SquashRepository) -> None:
        self.deps = deps
        self.squashes = squashes
        self.numbering = deps.settings.frs_numbering

    # --- shared ----------------------------------------------------------------------

    def row_tokens(self, row: dict[str, Any]) -> int:
        """Return what one stored message costs in the model's context."""
        return row_tokens(row, self.deps.counter)

    @staticmethod
    def error(call_id: str, name: str, text: str) -> ToolMessage:
        """Return a tool error the model reads (never an exception)."""
        return ToolMessage(text, tool_call_id=call_id, name=name, status="error")

    @staticmethod
    def first_compression(state: dict[str, Any], call_id: str) -> bool:
        """Tell whether this call is the first compression its model answer asked for.

        Parallel compressions in one answer would each resolve against the same thread
        and race to update it; only the first runs, the others are told to wait.
        """
        for message in reversed(state.get("messages") or []):
            if isinstance(message, AIMessage) and any(
                c.get("id") == call_id for c in message.tool_calls
            ):
                ids = [c.get("id") for c in message.tool_calls if c["name"] in COMPRESSING]
                return not ids or ids[0] == call_id
        return True

    async def index_of(self, state: dict[str, Any], value: int) -> int | str:
        """Return the thread index the model's position/number points at, or an error."""
        thread = state["thread"]
        keys = shown_keys(thread, self.numbering)
        if value in keys:
            return keys.index(value)
        if self.numbering != "absolute":
            return (
                f"Error: position {value} is out of range; the thread has positions 1-{len(keys)}."
            )
        shown = f"Numbers in the thread: {describe_keys(keys)}."
        status = await self.squashes.number_status(uuid.UUID(state["conversation_id"]), value)
        if status == "squashed":
            return (
                f"Error: message {value} was already compressed (squashed): it is no longer "
                f"in the thread, its summary stands in its place. {shown}"
            )
        if status == "live":
            return f"Error: message {value} is not in the current thread (too old). {shown}"
        return f"Error: there is no message {value}. {shown}"

    async def learn_facts_first(self, state: dict[str, Any], ids: list[int]) -> None:
        """Extract facts from the messages about to be replaced, while they are verbatim.

        A failure is logged and the squash goes on: the summary inherits the pending
        mark, so facts are extracted from it later.
        """
        try:
            await extract_pending(
                self.deps, state["user_id"], uuid.UUID(state["conversation_id"]), only=ids
            )
        except Exception as exc:
            log_failure(logger, "fact extraction before a squash", exc)

    # --- the tools ----------------------------------------------------------------------

    async def view_thread(self, state: dict[str, Any]) -> str:
        """Render the thread with sizes and previews."""
        thread = state.get("thread") or []
        if not thread:
            return "The thread is empty: there is nothing to compress."
        rows = await self.squashes.rows(
            uuid.UUID(state["conversation_id"]),
            [e["id"] for e in thread if e.get("id") is not None],
        )
        keys = shown_keys(thread, self.numbering)
        limit = protected_from(thread)
        lines, total = [], 0
        for index, (entry, key) in enumerate(zip(thread, keys, strict=True)):
            row = rows.get(entry.get("id"))
            if row is None or row["squashed_at"] is not None:
                lines.append(f"[{key}] (compressed or no longer stored)")
                continue
            tokens = self.row_tokens(row)
            total += tokens
            note = " (the user's latest message: stays verbatim)" if index == limit else ""
            lines.append(f"[{key}] {role_label(row)}, {tokens} tokens{note}: {_preview(row)}")
        if self.numbering == "absolute":
            how = f"message numbers {describe_keys(keys)}; gaps are compressed messages"
        else:
            how = f"positions 1-{len(keys)}"
        word = "numbers" if self.numbering == "absolute" else "positions"
        return (
            f"Thread ({len(thread)} messages, ~{total} tokens; {how}):\n"
            + "\n".join(lines)
            + f"\nCompressible: {word} {describe_keys(keys[:limit])}."
        )

    async def compress_range(
        self, state: dict[str, Any], call_id: str, first: int, last: int, summary: str
    ) -> Command[Any] | ToolMessage:
        """Resolve `first`..`last` and compress them."""
        name = "compress_range"
        if not state.get("thread"):
            return self.error(call_id, name, "Error: there is no numbered thread to compress.")
        start = await self.index_of(state, first)
        if isinstance(start, str):
            return self.error(call_id, name, start)
        end = await self.index_of(state, last)
        if isinstance(end, str):
            return self.error(call_id, name, end)
        problem = check_span(state["thread"], start, end, self.numbering)
        if problem:
            return self.error(call_id, name, problem)
        return await self.compress(state, call_id, name, start, end, summary)

    async def compress_last(
        self, state: dict[str, Any], call_id: str, count: int, summary: str
    ) -> Command[Any] | ToolMessage:
        """Resolve the last `count` messages and compress them."""
        name = "compress_last"
        if not state.get("thread"):
            return self.error(call_id, name, "Error: there is no numbered thread to compress.")
        span = resolve_last(state["thread"], count, self.numbering)
        if isinstance(span, str):
            return self.error(call_id, name, span)
        return await self.compress(state, call_id, name, span[0], span[1], summary)

    async def compress(
        self, state: dict[str, Any], call_id: str, name: str, start: int, end: int, summary: str
    ) -> Command[Any] | ToolMessage:
        """Squash thread indices start..end into `summary`; update the thread and context."""
        text = (summary or "").strip()
        if not text:
            return self.error(
                call_id,
                name,
                "Error: the summary is empty; write what the messages said that may still matter.",
            )
        if not self.first_compression(state, call_id):
            return self.error(
                call_id,
                name,
                "Error: one compression at a time: the first one in your "
                "answer ran and changed the thread; call again with positions from it.",
            )
        thread = state["thread"]
        ids = [thread[i].get("id") for i in range(start, end + 1)]
        if any(i is None for i in ids):
            return self.error(call_id, name, "Error: these messages are not stored yet.")
        await self.learn_facts_first(state, [int(i) for i in ids if i is not None])
        try:
            result = await self.squashes.squash(
                uuid.UUID(state["conversation_id"]),
                [int(i) for i in ids if i is not None],
                text,
                state.get("requested_by") or "model",
            )
        except SquashConflict as exc:
            return self.error(call_id, name, f"Error: {exc}; call view_thread and try again.")
        new_thread = replace_span(thread, start, end, result.summary)
        context = state.get("context") or []
        updates = rewrite_messages(context, thread, start, end, result.summary, self.numbering)
        replaced_tokens = sum(self.row_tokens(r) for r in result.replaced)
        summary_tokens = self.row_tokens(result.summary)
        keys = shown_keys(thread, self.numbering)
        n = end - start + 1
        if self.numbering == "absolute":
            where = f"messages {describe_keys(keys[start : end + 1])}"
            after = f"The summary is number {result.summary['number']}; other numbers are kept."
        else:
            where = f"positions {describe_keys(keys[start : end + 1])}"
            after = f"The summary is at position {start + 1}"
            after += f"; later messages moved up by {n - 1}." if n > 1 else "."
        note = (
            f"Compressed {where} ({n} messages, ~{replaced_tokens} tokens) into one summary "
            f"(~{summary_tokens} tokens). The thread now has {len(new_thread)} messages. {after}"
        )
        if not updates:
            note += " This turn's copy still shows the old messages; call view_thread."
        artifact = {
            "squash_id": result.squash_id,
            "replaced": n,
            "tokens_replaced": replaced_tokens,
            "tokens_summary": summary_tokens,
            "tokens_saved": replaced_tokens - summary_tokens,
        }
        message = ToolMessage(note, tool_call_id=call_id, name=name, artifact=artifact)
        update: dict[str, Any] = {"thread": new_thread, "messages": [message]}
        if updates:
            # This turn's copy of the context, compressed like the thread: only the first
            # compression of a model answer runs (`first_compression`), so one tool writes it.
            update["context"] = add_messages(context, cast(list[Any], updates))
        return Command(update=update)


def _preview(row: dict[str, Any]) -> str:
    text = " ".join(str(row.get("content") or "").split())
    if len(text) > PREVIEW_CHARS:
        text = text[:PREVIEW_CHARS].rstrip() + "…"
    calls = (row.get("meta") or {}).get("tool_calls") or []
    if calls:
        text = (text + " " if text else "") + "(calls " + ", ".join(c["name"] for c in calls) + ")"
    return text or "(empty)"
