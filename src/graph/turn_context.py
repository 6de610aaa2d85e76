"""The build_context node: what the model sees this turn, and the memory it must carry.

It reads the turn's memory (the window, the unsummarized messages before it, the running
summary, facts, compacts) in one round trip, applies the window rule of
src/graph/memory/window.py, and assembles the context (src/graph/context/). When the prompt
cannot carry every unsummarized message, the turn folds them into the summary first; if
that fails, the request says how many it leaves out.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from src.graph import prompts
from src.graph.context.assemble import build_context as assemble_context
from src.graph.context.render import row_tokens
from src.graph.conversation_state import ConversationState
from src.graph.deps import GraphDeps
from src.graph.memory.errors import log_failure
from src.graph.memory.idle import urgent
from src.graph.memory.summarizer import SummaryTooLong, fold_before, summary_limits, window_rule
from src.graph.memory.window import LAG_FACTOR, carried, due, window_count, window_size
from src.storage.turn_reads import read_turn

logger = logging.getLogger(__name__)

Row = dict[str, Any]

# How long a turn whose prompt cannot carry every unsummarized message waits for the fold
# it starts, and for one already under way, before it goes on and says what it left out.
SYNC_FOLD_SECONDS = 10.0
# Tries of that fold after transient failures (a model failing for a moment).
SYNC_FOLD_TRIES = 3
JOIN_FOLD_SECONDS = 1.0


@dataclass
class Built:
    """The context a turn assembled, and what it found about its memory."""

    messages: list[BaseMessage]
    snapshot: list[dict[str, Any]]
    tokens: int
    missing: int
    """Unsummarized messages the prompt could not carry."""
    first_kept: Row | None
    """The oldest stored message the prompt carries (else the current one)."""
    summary_due: bool
    facts_due: bool


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    if out.get("created_at") is not None:
        out["created_at"] = out["created_at"].isoformat()
    if out.get("conversation_id") is not None:
        out["conversation_id"] = str(out["conversation_id"])
    return out


def with_ids(messages: list[BaseMessage]) -> list[BaseMessage]:
    """Give the context's messages, just made for this turn, each an id (a compression
    replaces them by id): its position, short and compressible, unlike a random id for
    every message. Set in place: a copy of each cost 0.3 ms a turn."""
    for i, message in enumerate(messages):
        if not message.id:
            message.id = f"c{i}"
    return list(messages)


class TurnContext:
    """The build_context node, bound to the graph's dependencies."""

    def __init__(
        self, deps: GraphDeps, tool_tokens: int, reserve: Callable[[str], int] | None = None
    ) -> None:
        self.deps = deps
        self.tool_tokens = tool_tokens
        """What the tools' schemas take of every request's input budget."""
        self.reserve = reserve or (lambda model: tool_tokens)
        """What the tools offered to a model take of its requests' input budget (fewer
        tools on a small window: src/graph/window_fit.py)."""

    async def node(self, state: ConversationState, model: str) -> dict[str, Any]:
        """build_context: read the turn's memory in one round trip and assemble the
        model's context within the token budget of the turn's `model`.

        The request carries every message since /new (and not forgotten) that the
        running summary has not folded (see src/graph/memory/window.py): when the
        prompt cannot carry them all, the turn folds them itself first; if that fails
        too, the request says how many it leaves out, and it is logged.
        """
        built = await self._build(state, model)
        if built.missing:
            conversation_id = uuid.UUID(state["conversation_id"])
            logger.warning(
                "%d unsummarized messages of %s do not fit the prompt: folding them now",
                built.missing,
                conversation_id,
            )
            if await self._fold_now(state, model, built.first_kept):
                built = await self._build(state, model)
            if built.missing:
                logger.error(
                    "%d messages of %s are in neither the prompt nor the summary",
                    built.missing,
                    conversation_id,
                )
                notice = prompts.OMITTED_NOTE.format(count=built.missing)
                built = await self._build(state, model, notice)
        return {
            "context": with_ids(built.messages),
            "messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)],
            "thread": built.snapshot,
            "context_tokens": built.tokens,
            "tool_rounds": 0,
            "model": model,
            "summary_due": built.summary_due,
            "facts_due": built.facts_due,
        }

    async def _build(self, state: ConversationState, model: str, notice: str = "") -> Built:
        """Read the turn's memory and assemble the context (see `build_context`)."""
        deps, settings = self.deps, self.deps.settings
        user_id = state["user_id"]
        conversation_id = uuid.UUID(state["conversation_id"])
        async with deps.conversations.pool.connection() as conn:
            reads = await read_turn(
                conn,
                user_id,
                conversation_id,
                # The current message and the window; what lags before it comes with
                # the unsummarized ones (usually fewer than the window).
                messages=settings.max_context + 1,
                lag=settings.max_context * (1 + LAG_FACTOR) + 1,
                facts_every=settings.facts_every,
                # Twice the prompt's share: the objective filter may leave some out.
                facts=2 * settings.max_facts_in_prompt,
                # Every compact is of an ended session: earlier conversations, and
                # earlier sessions of this one that ended by silence.
                compacts=settings.compacts_in_prompt,
                member=state.get("member_id") or 0,
            )
        user, current = reads.user, state.get("input_message_id")
        count = window_count(user, reads.conversation)
        # Seed 000 counts the window before the current message is stored; storing it
        # counted it already.
        size = window_size(None if count is None else count - 1, settings.max_context)
        seen = {r["id"] for r in reads.messages}
        rows = [r for r in reads.unsummarized if r["id"] not in seen] + reads.messages
        rows.sort(key=lambda r: (r["created_at"], r["id"]))
        this = next((r for r in rows if r["id"] == current), None)
        rows = [r for r in rows if r["id"] != current]
        limits = summary_limits(settings, self.reserve(model), model)
        rule = window_rule(settings, size, limits)
        history, lagging, hidden = carried(rows, rule)
        if lagging and not notice:
            # Beyond seed 000's window: allowed only while the summary fails or lags.
            logger.warning(
                "summary of %s lags: %d messages beyond MAX_CONTEXT stay in the prompt",
                conversation_id,
                lagging,
            )
        conv = reads.conversation
        values = dict(
            state,
            model=model,
            history=[_jsonable(r) for r in history],
            summary=conv["summary"] if conv else "",
            facts=[_jsonable(f) for f in reads.facts],
            compacts=[_jsonable(c) for c in reads.compacts],
            notice=notice,
        )
        messages, snapshot, tokens = assemble_context(
            values, settings, deps.counter, reserve=self.reserve(model)
        )
        shown = {e["id"] for e in snapshot}
        left_out = [r for r in history if not r["summarized"] and r["id"] not in shown]
        if len(reads.unsummarized) >= settings.max_context * (1 + LAG_FACTOR) + 1:
            hidden = max(hidden, 1)  # more than was read: the prompt cannot carry them
        kept = [r for r in history if r["id"] in shown]
        # After the reply the thread holds the current message and at least the answer.
        after = [*rows, {"id": current, "content": state["input_text"], "summarized": False}]
        after.append({"id": None, "content": "", "summarized": True})
        cost = functools.partial(row_tokens, counter=deps.counter)
        return Built(
            messages=messages,
            snapshot=snapshot,
            tokens=tokens,
            missing=hidden + len(left_out),
            first_kept=kept[0] if kept else this,
            summary_due=bool(due(after, rule, cost)),
            facts_due=conv is not None and conv["facts_pending"] >= settings.facts_every,
        )

    async def _fold_now(self, state: ConversationState, model: str, before: Row | None) -> bool:
        """Fold every unsummarized message before `before` (the oldest message the
        prompt keeps, else the current one) now, within the model's timeout; say
        whether it ran."""
        deps = self.deps
        conversation_id = uuid.UUID(state["conversation_id"])
        key = ("summary", conversation_id)
        if before is None or deps.backoff.waiting(key):
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(deps.settings.llm_timeout, SYNC_FOLD_SECONDS)
        running = deps.runs.running(key)
        if running is not None and deps.replies.holds(key):
            # A fold ahead waiting for idle time (src/graph/memory/idle.py): it has asked
            # nothing yet, and this turn's own fold does its work now.
            running.cancel()
            await asyncio.wait({running})
            running = None
        if running is not None:
            # A fold under way (a slow model): a moment for it, not its whole time; if it
            # failed, this turn's own fold tries again.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(running), JOIN_FOLD_SECONDS)
            if not running.done():
                logger.warning("a fold of %s is still under way: not waited for", conversation_id)
                return False
        for attempt in range(1, SYNC_FOLD_TRIES + 1):
            with urgent():  # part of the answer: it waits for no idle time
                task = deps.runs.start(
                    key,
                    lambda: fold_before(
                        deps, state["user_id"], conversation_id, before, model, self.reserve(model)
                    ),
                )
            try:
                # Not cancelled when the wait ends: it goes on and commits for a later turn.
                await asyncio.wait_for(asyncio.shield(task), max(0.1, deadline - loop.time()))
            except Exception as exc:
                what = f"folding the summary of {conversation_id} in the turn (try {attempt})"
                log_failure(logger, what, exc)
                # A summary that did not fit would not fit a second time within the turn.
                if isinstance(exc, TimeoutError | SummaryTooLong) or attempt == SYNC_FOLD_TRIES:
                    if not isinstance(exc, TimeoutError):
                        deps.memory_failed(key, exc)
                    return False
                await asyncio.sleep(min(0.25 * attempt, max(0.0, deadline - loop.time())))
                continue
            break
        deps.backoff.succeeded(key)
        deps.endpoint_answered(deps.summary_model)
        return True
