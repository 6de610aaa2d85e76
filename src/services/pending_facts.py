"""Facts of conversations /new deletes: their texts are kept until the facts are stored.

/new deletes the user's conversations. Messages whose facts are not extracted yet would
go with them, so before the wipe each batch's text (what the extractor reads) is kept in
`pending_facts` and the messages are marked, in one transaction. Extraction is tried at
once; when the model fails, the session-end job tries again with an exponential back-off
(RETRY_BASE_SECONDS doubling up to RETRY_CAP_SECONDS). A text is deleted in the
transaction that stores its facts; a model's refusal (400/413/422) drops it with one
warning. A kept text is older than what was learned after it: its facts never replace a
fact learned since from another conversation.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from src.graph.deps import GraphDeps
from src.graph.memory import facts as extraction
from src.graph.memory.epoch import epoch_now
from src.graph.memory.errors import is_refusal, log_failure
from src.graph.memory.fact_members import by_member
from src.graph.memory.facts import Batch
from src.graph.memory.facts_salvage import store_facts
from src.graph.memory.structured import CutAnswer
from src.storage.base import Conn
from src.storage.epochs import MemoryEpoch, still_holds
from src.storage.pending_facts_repo import PendingFactsRepository

logger = logging.getLogger(__name__)

# Above a model call's worst case (LLM_TIMEOUT with its retries): a try in flight is
# not taken again by another process.
RETRY_BASE_SECONDS = 300.0
RETRY_CAP_SECONDS = 6 * 3600.0
# Owners the job may not serve now (allowlist, token budget) are looked at again later.
POSTPONE_SECONDS = 3600.0


async def ask_facts(
    deps: GraphDeps, owner_id: int, conversation_id: uuid.UUID, text: str
) -> list[dict[str, Any]]:
    """Return the facts the summary model finds in `text`, asked as `extract_batch` asks.

    A model error propagates; an unreadable answer (cut, or not JSON) gives no facts.
    """
    known = await extraction.known_for(deps, owner_id, [text])
    try:
        return await extraction.ask_facts(deps, owner_id, conversation_id, text, known)
    except CutAnswer:
        # As cut if asked again: unreadable, and the text done with.
        logger.warning("fact extraction for %s: no readable facts in the answer", owner_id)
        return []


class PendingFacts:
    """Keep the texts of facts /new would lose, and extract them until it succeeds."""

    def __init__(self, deps: GraphDeps) -> None:
        self.deps = deps
        self.repo = PendingFactsRepository(deps.conversations.pool)

    async def keep(self, batches: list[Batch], conn: Conn) -> int:
        """Keep the batches' texts and mark their messages extracted, in the caller's
        transaction; return how many texts were kept (a batch without a user message
        has none). Only the messages that still wait for extraction are kept, read
        again and locked here: what a delete or an extraction still under way took
        meanwhile is not kept again."""
        deps, due = self.deps, self.deps.clock()
        kept = 0
        for read in batches:
            rows = await deps.conversations.lock_facts_pending(read.conversation_id, read.ids, conn)
            fresh = [read] if len(rows) == len(set(read.ids)) else []
            if rows and not fresh:
                fresh = extraction.batches(deps, read.owner_id, read.conversation_id, rows)
            for batch in fresh:
                kept += await self._keep(batch, due, conn)
        return kept

    async def _keep(self, batch: Batch, due: datetime, conn: Conn) -> int:
        for text in batch.texts:  # a long message's parts, each read on its own
            await self.repo.add(batch.owner_id, batch.conversation_id, text, due, conn)
        await self.deps.conversations.mark_facts_extracted(
            batch.conversation_id, batch.ids, conn=conn
        )
        return len(batch.texts)

    async def extract_owner(self, owner_id: int, now: datetime | None = None) -> int:
        """Try the owner's texts due at `now`, oldest first; return the facts stored.

        A transient failure stops the try: the rest waits for its back-off, set when the
        try began. A refused text is dropped and the next one tried. Facts found after a
        delete of the owner's memory that came since the try began are not stored.
        """
        now = now or self.deps.clock()
        epoch = await epoch_now(self.deps, owner_id)
        rows = await self.repo.claim(owner_id, now, RETRY_BASE_SECONDS, RETRY_CAP_SECONDS)
        stored = 0
        for row in rows:
            try:
                stored += await self._extract(row, epoch)
            except Exception as exc:
                if not is_refusal(exc):
                    log_failure(logger, f"fact extraction from texts kept for {owner_id}", exc)
                    break
                what = f"fact extraction from a text kept for {owner_id} (refused: dropped)"
                log_failure(logger, what, exc)
                await self.repo.delete(owner_id, row["id"])
        return stored

    async def retry_due(
        self,
        now: datetime | None = None,
        limit: int = 100,
        admits: Callable[[int], bool] | None = None,
    ) -> int:
        """Try the kept texts due at `now` (a job), of up to `limit` owners that `admits`
        lets in and whose token budget allows it; return the facts stored."""
        now = now or self.deps.clock()
        stored = 0
        for owner in await self.repo.due_owners(now, limit):
            try:
                if (admits is not None and not admits(owner)) or not await self.allows(owner):
                    later = now + timedelta(seconds=POSTPONE_SECONDS)
                    await self.repo.postpone(owner, now, later)
                    continue
                stored += await self.extract_owner(owner, now)
            except Exception:
                logger.error("trying the kept facts of %s failed", owner, exc_info=True)
        return stored

    async def allows(self, owner_id: int) -> bool:
        """Tell whether the owner's token budget lets their memory work call models now."""
        budget = self.deps.budget
        return budget is None or await budget.allows(owner_id)

    async def _extract(self, row: dict[str, Any], epoch: MemoryEpoch | None = None) -> int:
        """Ask for one kept text's facts; store them and delete the text in one transaction
        (none while the owner's memory is not at `epoch` any more)."""
        deps, owner = self.deps, row["telegram_user_id"]
        source = row["source_conversation_id"]
        facts = await ask_facts(deps, owner, source, row["text"])
        async with deps.conversations.pool.connection() as conn, conn.transaction():
            if not await still_holds(conn, epoch):
                return 0  # memory deleted meanwhile (a delete of memory came since)
            if not await self.repo.delete(owner, row["id"], conn):
                return 0  # deleted meanwhile (/memory clear): its facts are not wanted
            newer = {
                (member, key)
                for member in by_member(facts)
                for key in await deps.memory.newer_fact_keys(
                    owner, row["created_at"], source, conn, member
                )
            }
            facts = [f for f in facts if (f["member"], f["key"]) not in newer]
            if facts:
                await store_facts(deps, owner, facts, source, conn)
        logger.info("stored %d facts of %s from a kept text", len(facts), owner)
        return len(facts)
