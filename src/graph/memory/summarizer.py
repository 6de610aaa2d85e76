"""Fold messages that left working memory into the running summary, incrementally.

Overflow is every unsummarized message older than the working window: the last
`MAX_CONTEXT` messages, and of those only the newest that fit the working-memory budget
(so a message too big to be shown is summarized rather than silently lost). Each call
reads only the previous summary and a bounded batch of overflow (seed 002's incremental
summarization), and the stored summary is cut to its budget on a sentence boundary, so
the summarizer's input does not grow with the conversation. Typed facts are extracted
from the batch first (src/graph/facts.py).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage

from src.config import Settings
from src.graph import prompts
from src.graph.context.budget import Layers, truncate_text
from src.graph.context.render import row_tokens, transcript_line
from src.graph.context.working import group_units, select_recent
from src.graph.deps import GraphDeps
from src.graph.output_caps import summary_tokens, with_output_cap
from src.graph.tokens import TokenCounter

logger = logging.getLogger(__name__)

# Batches folded per call at most: catches up after a backlog without running for long.
MAX_ROUNDS = 3
# Tokens of the summarizer's own instructions, reserved out of its model's input budget.
PROMPT_RESERVE = 600


@dataclass(frozen=True)
class SummaryLimits:
    """Token limits of one summarizer call."""

    summary: int
    """Longest stored summary: two thirds of the summary layer (the rest is for
    previous conversations)."""
    batch: int
    """Most tokens of overflow in one call."""
    message: int
    """Most tokens of one message in a batch."""
    working: int
    """Working memory of the chat model when the other layers are full: what fits there
    is not overflow."""


def summary_limits(settings: Settings, reserve: int = 0) -> SummaryLimits:
    """Return the summarizer's limits; `reserve` is what the chat model's tools take."""
    chat = Layers.for_model(settings, settings.llm_model, reserve)
    summary = max(64, chat.summary * 2 // 3)
    room = Layers.for_model(settings, settings.effective_summary_model).total
    batch = max(256, min(chat.working, room - summary - PROMPT_RESERVE))
    # What working memory holds even when the other layers use their whole shares.
    working = max(0, min(chat.working, chat.total - chat.system - chat.facts - chat.summary))
    return SummaryLimits(summary, batch, max(64, batch // 4), working)


def overflow_batch_cap(trigger: int) -> int:
    """Return the most overflow messages one summarizer call takes."""
    return max(3 * trigger, 30)


async def find_overflow(
    deps: GraphDeps, conversation_id: uuid.UUID, reserve: int = 0
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Return the conversation and its unsummarized overflow, in thread order (bounded)."""
    conv = await deps.conversations.get_conversation(conversation_id)
    if conv is None:
        return None, []
    settings = deps.settings
    window = await deps.conversations.load_last_messages(conversation_id, settings.max_context)
    window = [r for r in window if not r["summarized"]]
    limits = summary_limits(settings, reserve)
    kept = select_recent(group_units(window), limits.working, lambda r: row_tokens(r, deps.counter))
    rows = await deps.conversations.unsummarized(
        conversation_id, overflow_batch_cap(settings.summary_trigger)
    )
    if kept:
        # Compare thread positions, not ids: a compression's summary row has a new id
        # but stands where the range it replaced stood (seed 003).
        first = kept[0][0]
        boundary = (first["created_at"], first["id"])
        return conv, [r for r in rows if (r["created_at"], r["id"]) < boundary]
    if not window:
        return conv, []
    # Nothing of the window fits its budget: all of it, and what precedes it, overflows.
    last = (window[-1]["created_at"], window[-1]["id"])
    return conv, [r for r in rows if (r["created_at"], r["id"]) <= last]


def take_batch(
    overflow: list[dict[str, Any]], limits: SummaryLimits, counter: TokenCounter
) -> tuple[list[dict[str, Any]], str]:
    """Return the oldest overflow messages that fit one call, and their text."""
    lines: list[str] = []
    used = 0
    for row in overflow:
        line = transcript_line(row, limits.message, counter)
        cost = counter.count(line) + 1
        if lines and used + cost > limits.batch:
            break
        lines.append(line)
        used += cost
    return overflow[: len(lines)], "\n".join(lines)


async def update_summary(deps: GraphDeps, summary: str, conversation: str) -> str:
    """Return the running summary extended with `conversation`, cut to its budget."""
    limits = summary_limits(deps.settings)
    strategy = deps.settings.summary_strategy
    prompt = prompts.SUMMARY_PROMPT.format(
        instruction=prompts.SUMMARY_INSTRUCTIONS[strategy],
        summary=summary or "(empty)",
        conversation=conversation,
        words=max(20, limits.summary // 2),
    )
    model = with_output_cap(deps.summary_model, summary_tokens(limits.summary))
    answer = await model.ainvoke([SystemMessage(prompts.SUMMARIZER_SYSTEM), HumanMessage(prompt)])
    text = answer.text.strip()
    if not text:
        raise ValueError("the summarizer returned an empty summary")
    return truncate_text(text, limits.summary, deps.counter)


async def summarize_overflow(deps: GraphDeps, conversation_id: uuid.UUID, reserve: int = 0) -> int:
    """Extend the running summary when enough overflow gathered; return messages folded.

    A model error stops here with nothing marked, so the batch is retried on a later
    turn. `reserve`: the tokens the chat model's tool schemas take from its input budget.
    """
    limits = summary_limits(deps.settings, reserve)
    folded = 0
    for _ in range(MAX_ROUNDS):
        conv, overflow = await find_overflow(deps, conversation_id, reserve)
        if conv is None or not overflow or len(overflow) < deps.settings.summary_trigger:
            break
        batch, conversation = take_batch(overflow, limits, deps.counter)
        text = await update_summary(deps, conv["summary"], conversation)
        await deps.conversations.fold_into_summary(conversation_id, text, [r["id"] for r in batch])
        folded += len(batch)
        logger.info(
            "summary of %s extended with %d messages (%d tokens in, %d chars out)",
            conversation_id,
            len(batch),
            deps.counter.count(conversation),
            len(text),
        )
    return folded
