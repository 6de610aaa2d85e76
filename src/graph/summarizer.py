"""Fold messages that left the working window into the running summary, incrementally.

Each call reads only the previous summary and a bounded batch of overflow (seed 002's
incremental summarization), so its cost does not grow with the conversation.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage

from src.graph import prompts
from src.graph.deps import GraphDeps

logger = logging.getLogger(__name__)


def overflow_batch_cap(trigger: int) -> int:
    """Return the most overflow messages one summarizer call takes."""
    return max(3 * trigger, 30)


async def find_overflow(
    deps: GraphDeps, conversation_id: uuid.UUID
) -> tuple[str, int, list[dict[str, Any]]]:
    """Return the summary, how far it reaches, and the unsummarized overflow (oldest first)."""
    conv = await deps.conversations.get_conversation(conversation_id)
    if conv is None:
        return "", 0, []
    window = deps.settings.max_context
    cap = overflow_batch_cap(deps.settings.summary_trigger)
    rows = await deps.conversations.unsummarized(
        conversation_id, conv["summary_upto_id"], window + cap
    )
    overflow = rows[: max(0, min(cap, len(rows) - window))]
    return conv["summary"], conv["summary_upto_id"], overflow


def format_for_summary(rows: list[dict[str, Any]]) -> str:
    """Render messages as `[role]: text` lines for the summarizer."""
    return "\n".join(f"[{r['role']}]: {r['content']}" for r in rows)


async def summarize_overflow(deps: GraphDeps, conversation_id: uuid.UUID) -> int:
    """Extend the running summary when enough overflow gathered; return messages folded."""
    summary, _, overflow = await find_overflow(deps, conversation_id)
    if len(overflow) < deps.settings.summary_trigger:
        return 0
    conversation = format_for_summary(overflow)
    if summary:
        prompt = prompts.SUMMARIZE_UPDATE.format(summary=summary, conversation=conversation)
    else:
        prompt = prompts.SUMMARIZE_FIRST.format(conversation=conversation)
    answer = await deps.summary_model.ainvoke(
        [SystemMessage(prompts.SUMMARIZER_SYSTEM), HumanMessage(prompt)]
    )
    text = answer.text.strip()
    if not text:
        raise ValueError("the summarizer returned an empty summary")
    await deps.conversations.update_summary(conversation_id, text, overflow[-1]["id"])
    logger.info(
        "summary of %s extended with %d messages (%d chars)",
        conversation_id,
        len(overflow),
        len(text),
    )
    return len(overflow)
