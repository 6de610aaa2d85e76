"""The nodes after the reply: the running summary, then facts (src/graph/memory/).

Each runs as the conversation's one run of its kind in this process, shielded, so the
owner's next turn stops waiting for it without cancelling it (src/graph/memory/folds.py);
a transient failure backs off, one line in the log.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from src.graph.conversation_state import ConversationState
from src.graph.deps import GraphDeps
from src.graph.memory.errors import log_failure
from src.graph.memory.facts import extract_pending
from src.graph.memory.summarizer import summarize_due
from src.graph.model_calls import OverBudget

logger = logging.getLogger(__name__)


class MemoryNodes:
    """summarize and extract_facts, bound to the graph's dependencies."""

    def __init__(self, deps: GraphDeps, tool_tokens: int) -> None:
        self.deps = deps
        self.tool_tokens = tool_tokens

    async def _within_budget(self, state: ConversationState, work: str) -> bool:
        """Tell whether the owner's token budget lets the work after the reply call
        models; if not, it waits (nothing marked: a later turn does it)."""
        budget = self.deps.budget
        if budget is None or await budget.allows(state["user_id"]):
            return True
        logger.info("%s of %s waits: over the token budget", work, state["user_id"])
        return False

    async def extract_facts(self, state: ConversationState) -> dict[str, Any]:
        """Extract facts from the messages not extracted yet; a failure loses nothing."""
        if not await self._within_budget(state, "fact extraction"):
            return {"facts_learned": 0}
        conversation_id = uuid.UUID(state["conversation_id"])
        stored = await self._memory_work(
            ("facts", conversation_id),
            "fact extraction",
            lambda: extract_pending(self.deps, state["user_id"], conversation_id),
        )
        return {"facts_learned": stored}

    async def summarize(self, state: ConversationState) -> dict[str, Any]:
        """Fold what is due into the running summary; a failure is logged, loses nothing."""
        if not await self._within_budget(state, "summary"):
            return {"summarized": 0}
        conversation_id = uuid.UUID(state["conversation_id"])
        model = state.get("model") or self.deps.settings.llm_model
        folded = await self._memory_work(
            ("summary", conversation_id),
            "summary",
            lambda: summarize_due(
                self.deps, state["user_id"], conversation_id, model, self.tool_tokens
            ),
        )
        return {"summarized": folded}

    async def _memory_work(
        self, key: tuple[str, uuid.UUID], what: str, work: Callable[[], Awaitable[int]]
    ) -> int:
        """Run memory work after the reply as the conversation's one run of that kind,
        shielded: when the owner's next turn makes this turn give way, the work goes on
        and commits instead of being cancelled and sent again (src/graph/memory/folds.py).
        A transient failure backs off; nothing is marked that was not stored."""
        deps = self.deps
        if deps.backoff.waiting(key) and deps.runs.running(key) is None:
            logger.info("%s of %s waits after a failure", what, key[1])
            return 0

        async def logged() -> int:
            try:
                done = await work()
            except OverBudget:
                logger.info("%s of %s stopped: over the budget", what, key[1])
                return 0  # nothing marked: a later turn does it, no back-off
            except Exception as exc:
                delay = deps.memory_failed(key, exc)
                log_failure(logger, f"{what} of {key[1]} (next try in {delay:.0f} s)", exc)
                return 0
            deps.backoff.succeeded(key)
            if done:  # the memory model answered
                deps.endpoint_answered(deps.summary_model)
            return done

        return int(await asyncio.shield(deps.runs.start(key, logged)))
