"""Session ends (seed 001): facts from the session, and a compact of it.

A session is a stretch of a conversation: it ends at `/new`, or after
`SESSION_IDLE_MINUTES` of silence (noticed by the periodic job, or when the next message
arrives, before it is answered). An idle conversation is not closed: the user's next
message continues it, as the Telegram thread on their screen does, in a new session.
Each ended session gets its own compact (see src/services/compacts.py), at most
`MAX_COMPACTS` per user; the compacts of ended sessions, this conversation's earlier ones
included, appear under "Previous conversations" in later prompts. Facts not extracted yet
are extracted at every end.

Ending a session never blocks a reply and never loses it. When the next message notices
the silence, the plain-text compact is stored at once (that turn's prompt has it) and the
model's compact and the facts come after the turn. The job and /new wait a few seconds
for the models, then store the plain-text compact and let the model's replace it when it
comes. /new keeps the facts it would delete (src/services/pending_facts.py). A model
error, invalid JSON or a summary far over 500 characters is repaired or recorded as plain
text, and logged.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Coroutine
from datetime import datetime
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from src.graph import prompts
from src.graph.deps import GraphDeps
from src.graph.memory.epoch import epoch_now, started, working_from
from src.graph.memory.errors import log_failure
from src.graph.memory.facts import WIPE_READ_LIMIT, Batch, extract_batch, read_pending
from src.graph.model_calls import call_config
from src.graph.output_caps import COMPACT_TOKENS, with_output_cap
from src.services.compacts import (
    COMPACT_CHARS,
    COMPACT_SCHEMA,
    TOO_LONG_CHARS,
    Compact,
    Session,
    fallback_compact,
    parse_compact,
    read_session,
)
from src.services.pending_facts import PendingFacts
from src.storage.epochs import still_holds
from src.storage.pg_client import background_context

__all__ = [
    "COMPACT_CHARS",
    "TOO_LONG_CHARS",
    "Compact",
    "Compactor",
    "fallback_compact",
    "parse_compact",
]

logger = logging.getLogger(__name__)

# How long the job and /new wait for the models before going on without them.
WAIT_SECONDS = 10.0


class Compactor:
    """End sessions: extract their facts, compact them into long-term memory (seed 001)."""

    def __init__(
        self, deps: GraphDeps, model: BaseChatModel, wait_seconds: float = WAIT_SECONDS
    ) -> None:
        self.deps = deps
        self.model = model
        self.wait_seconds = wait_seconds
        self.pending = PendingFacts(deps)
        """The facts /new keeps until they are extracted."""
        self._tasks: set[asyncio.Task[Any]] = set()

    async def ask(self, session: Session) -> Compact | None:
        """Return the model's compact of the session, repaired where needed; None when the
        model failed (logged).

        A session longer than one call is read in parts, oldest first: each call is
        given the compact the previous one wrote, and the last one's is the session's.
        """
        compact: Compact | None = None
        try:
            model = with_output_cap(self.model, COMPACT_TOKENS)
            config = call_config("compact", session.owner_id, session.conversation_id)
            for part in session.parts:
                earlier = compact.summary if compact is not None else ""
                text = f"Summary of the earlier part:\n{earlier}\n\n" if earlier else ""
                prompt = prompts.COMPACT_PROMPT.format(
                    chars=COMPACT_CHARS, conversation=f"{text}Messages:\n{part}"
                )
                messages = [SystemMessage(prompts.COMPACT_SYSTEM), HumanMessage(prompt)]
                answers = self.deps.json_answers
                data, raw = await answers.ask(model, messages, COMPACT_SCHEMA, config)
                compact = parse_compact(raw, data)
        except Exception as exc:
            log_failure(logger, f"compaction of {session.conversation_id}", exc)
            return None
        if compact is not None and compact.repaired:
            logger.warning(
                "compaction of %s repaired: %s", session.conversation_id, compact.repaired
            )
        return compact

    async def _save(
        self, session: Session, compact: Compact, replace: bool
    ) -> dict[str, Any] | None:
        """Store the session's compact, unless the owner's memory was deleted from since
        the session end started (epoch.py): then it is dropped (None)."""
        async with self.deps.conversations.pool.connection() as conn, conn.transaction():
            if not await still_holds(conn, started(session.owner_id)):
                logger.info("compact of %s dropped: memory was deleted meanwhile", session.owner_id)
                return None
            row = await self.deps.memory.add_compact(
                session.owner_id,
                session.conversation_id,
                compact.summary,
                compact.topics,
                compact.last_action,
                keep=self.deps.settings.max_compacts,
                conn=conn,
                created_at=session.ended_at,
                replace=replace,
            )
        logger.info(
            "compacted session of %s in %s (%d chars%s)",
            session.owner_id,
            session.conversation_id,
            len(compact.summary),
            ", plain text" if compact.repaired == "model failed" else "",
        )
        return row

    async def _replace(self, session: Session, asking: Awaitable[Compact | None]) -> None:
        """Replace the session's plain-text compact with the model's, when it comes; a
        compact deleted meanwhile (a delete of memory) stays deleted."""
        try:
            compact = await asking
            if compact is None:
                return  # the plain text stays
            async with self.deps.conversations.pool.connection() as conn, conn.transaction():
                row = None
                if await still_holds(conn, started(session.owner_id)):
                    row = await self.deps.memory.replace_compact(
                        session.owner_id,
                        session.conversation_id,
                        session.ended_at,
                        compact.summary,
                        compact.topics,
                        compact.last_action,
                        conn=conn,
                    )
        except Exception:
            logger.error("compaction of %s failed", session.conversation_id, exc_info=True)
            return
        logger.info(
            "compact of %s in %s: the model's replaced the plain text%s",
            session.owner_id,
            session.conversation_id,
            "" if row is not None else " (none left to replace)",
        )

    async def end_session(
        self,
        owner_id: int,
        conversation_id: uuid.UUID,
        until: datetime | None = None,
        keep_facts: bool = False,
    ) -> dict[str, Any] | None:
        """End the session that ends at `until` (default: the last message), for the job
        and /new; return its compact (None when the session held no user message).

        Reads everything first, then lets the models work for at most `wait_seconds`: a
        compact the model has not written by then is stored as plain text at once and
        replaced when the model answers, and fact extraction goes on in the background.
        Never raises for a model's failure.

        With `keep_facts` (/new, which deletes the conversation next) the facts not
        extracted yet are kept first (PendingFacts) and extracted from there, so a failing
        model loses none; a database error then propagates, and /new deletes nothing.
        An owner over their token budget gets the plain-text compact and no model call.
        What it stores after a delete of the owner's memory that came meanwhile is
        dropped (the epoch read here, see src/graph/memory/epoch.py).
        """
        with working_from(await epoch_now(self.deps, owner_id)):
            return await self._end_session(owner_id, conversation_id, until, keep_facts)

    async def _end_session(
        self,
        owner_id: int,
        conversation_id: uuid.UUID,
        until: datetime | None,
        keep_facts: bool,
    ) -> dict[str, Any] | None:
        try:
            conv = await self.deps.conversations.get_conversation(conversation_id)
            until = until or (conv or {}).get("last_message_at")
            session = await read_session(self.deps, owner_id, conversation_id, until)
            pending = await read_pending(
                self.deps, owner_id, conversation_id, limit=WIPE_READ_LIMIT
            )
        except Exception:
            if keep_facts:
                raise
            logger.error("ending the session of %s: reading failed", conversation_id, exc_info=True)
            return None
        if keep_facts:
            async with self.deps.conversations.pool.connection() as conn, conn.transaction():
                await self.pending.keep(pending, conn)
        facts = self.pending.extract_owner(owner_id) if keep_facts else self._extract(pending)
        row = await self._compact(owner_id, session, facts)
        if until is not None:
            await self.deps.memory.mark_session_ended(conversation_id, until)
        return row

    async def _compact(
        self, owner_id: int, session: Session | None, facts: Coroutine[Any, Any, Any]
    ) -> dict[str, Any] | None:
        """Run `facts` (the session's extraction) and the model's compact, waiting at most
        `wait_seconds`; store the compact (plain text if the model is slow) and return it."""
        if not await self.allows(owner_id):
            facts.close()
            logger.info("session of %s ends without models: over the token budget", owner_id)
            if session is None:
                return None
            return await self._save(session, fallback_compact(session.rows), True)
        waiting = [self._spawn(facts)]
        asking = self._spawn(self.ask(session)) if session is not None else None
        if asking is not None:
            waiting.append(asking)
        await asyncio.wait(waiting, timeout=self.wait_seconds)
        if session is None or asking is None:
            return None
        if asking.done():
            compact = asking.result() or fallback_compact(session.rows)
            return await self._save(session, compact, replace=True)
        logger.warning("compaction of %s is slow; plain text for now", session.conversation_id)
        row = await self._save(session, fallback_compact(session.rows), False)
        self._spawn(self._replace(session, asking))
        return row

    async def end_session_now(
        self,
        owner_id: int,
        conversation_id: uuid.UUID,
        until: datetime,
        after: asyncio.Future[Any] | None = None,
    ) -> dict[str, Any] | None:
        """End the session that ended by silence at `until` without waiting for a model;
        return its plain-text compact (None when there is none to store).

        For the turn that noticed the silence: the plain-text compact is stored and the
        session marked ended at once, so that turn's prompt has it. The model's compact
        (replacing it) and the session's facts come in the background once `after` (the
        turn) is done. Never raises for a model's failure.
        """
        with working_from(await epoch_now(self.deps, owner_id)):
            return await self._end_now(owner_id, conversation_id, until, after)

    async def _end_now(
        self,
        owner_id: int,
        conversation_id: uuid.UUID,
        until: datetime,
        after: asyncio.Future[Any] | None,
    ) -> dict[str, Any] | None:
        try:
            session = await read_session(self.deps, owner_id, conversation_id, until)
        except Exception:
            logger.error("ending the session of %s: reading failed", conversation_id, exc_info=True)
            return None
        row = None
        if session is not None:
            plain = fallback_compact(session.rows)
            row = await self._save(session, plain, replace=False)
        await self.deps.memory.mark_session_ended(conversation_id, until)
        self._spawn(self._after(owner_id, conversation_id, session, after))
        return row

    async def _after(
        self,
        owner_id: int,
        conversation_id: uuid.UUID,
        session: Session | None,
        after: asyncio.Future[Any] | None,
    ) -> None:
        """Compact the ended session with the model and extract its facts, after `after`."""
        if after is not None:
            await asyncio.wait([after])
        try:
            if not await self.allows(owner_id):
                return  # the plain text stays; the facts stay pending on the messages
            pending = await read_pending(
                self.deps, owner_id, conversation_id, limit=WIPE_READ_LIMIT
            )
        except Exception:
            logger.error("ending the session of %s: reading failed", conversation_id, exc_info=True)
            return
        work: list[Awaitable[Any]] = [self._extract(pending)]
        if session is not None:
            work.append(self._replace(session, self.ask(session)))
        await asyncio.gather(*work)

    async def allows(self, owner_id: int) -> bool:
        """Tell whether the owner's token budget lets their session end call models."""
        return await self.pending.allows(owner_id)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(work, context=background_context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _extract(self, pending: list[Batch]) -> int:
        """Extract the facts of pending batches, oldest first; return how many were stored.

        A failure stops here: the rest stays pending on the messages, for the next run.
        """
        stored = 0
        for batch in pending:
            try:
                stored += await extract_batch(self.deps, batch)
            except Exception as exc:
                what = f"fact extraction at the end of a session of {batch.owner_id}"
                log_failure(logger, what, exc)
                break
        return stored

    async def drain(self) -> None:
        """Wait for session ends still finishing in the background."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
