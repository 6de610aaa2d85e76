"""AgentService: one turn of a user's conversation, and the commands around it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from src.graph.conversation_state import turn_input
from src.graph.deps import GraphDeps
from src.graph.memory.epoch import begin
from src.graph.memory.errors import status_of
from src.graph.memory.fact_members import AUTHOR
from src.graph.model_calls import OverBudget, turn_metadata
from src.graph.nodes import EmptyAnswer, ModelFailure, TooSmall
from src.graph.timestamps import own_zone, owner_zone, stamp
from src.services.embedding_worker import EmbeddingWorker
from src.services.media import MediaTurn
from src.services.memory_commands import MemoryCommands
from src.services.texts import t
from src.services.turn_lock import TurnLocks
from src.services.turn_types import CompressResult, Identity, TurnResult, TurnStream, session_over
from src.services.usage import Usage
from src.storage.checkpointer import PooledPostgresSaver
from src.storage.delivery_repo import Delivery
from src.storage.epochs import MemoryEpoch
from src.storage.turn_reads import TurnStart, send_turn_start

logger = logging.getLogger(__name__)

__all__ = [
    "DB_ERRORS",
    "AgentService",
    "CompressResult",
    "Identity",
    "TurnResult",
    "TurnStream",
    "session_over",
    "stamp",
]

DB_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)


def failure_text(exc: ModelFailure, model: str, language_code: str | None) -> str:
    """Return what a turn says when its model failed: the fix for a failure waiting will
    not mend (a window too small, an unknown model, a refused key), else "try later"."""
    if isinstance(exc, EmptyAnswer):
        return t("model_answered_nothing", language_code)
    if isinstance(exc, TooSmall):
        return t("window_too_small", language_code, window=exc.window, need=exc.need)
    status = status_of(exc.__cause__) if exc.__cause__ is not None else None
    if status == 404:
        return t("model_not_found", language_code, model=model)
    if status in (401, 403):
        return t("model_auth_refused", language_code, status=status)
    return t("model_error", language_code)


class AgentService(MemoryCommands):
    """Run turns through the graph, one at a time per owner, and the memory commands."""

    def __init__(
        self,
        deps: GraphDeps,
        graph: Any,
        checkpointer: Any = None,
        compactor: Any = None,
        embeddings: EmbeddingWorker | None = None,
        usage: Usage | None = None,
    ) -> None:
        self.deps = deps
        self.usage = usage
        """Usage accounting: every model call recorded, budgets. None: neither."""
        self.settings = deps.settings
        self.graph = graph
        self.checkpointer = checkpointer
        self.compactor = compactor
        self.embeddings = embeddings
        self.locks = TurnLocks(deps.conversations.pool)
        self._background: set[asyncio.Task[Any]] = set()

    # --- one turn ---------------------------------------------------------------

    def check_input(self, text: str, language: str | None) -> str | None:
        """Return the answer for input that cannot start a turn, or None if it can."""
        if not text or not text.replace("\x00", "").strip():  # NUL is dropped when stored
            return t("empty_message", language)
        if len(text) > self.settings.max_input_chars:
            return t("too_long", language, size=len(text), limit=self.settings.max_input_chars)
        return None

    async def handle_message(
        self,
        identity: Identity,
        text: str,
        delivery: Delivery | None = None,
        stream: TurnStream | None = None,
        media: MediaTurn | None = None,
        sent_at: datetime | None = None,
    ) -> TurnResult:
        """Store the user's message, run the graph, and return the reply.

        With a `delivery` (a Telegram update from the inbox), the stored message is
        linked to the update and the reply is stored in the outbox in the reply's own
        transaction; the same update run again (its worker died) reuses the stored
        message instead of storing it twice. With a `stream`, the turn is watched live.
        With `media` (voice, photos, documents: `text` is then read from them), the
        message's meta says what it held, its photos go to the model, and an album's
        other updates are marked answered with it. `sent_at`: when Telegram says the
        message was sent (a message that waited in the queue is stamped with it, not with
        the time its turn ran); None: now.

        The reply is returned as soon as it is stored; the memory work after it (summary,
        facts) goes on in the background, and gives way: the owner's next turn or command
        stops waiting for it after a short grace (GIVE_WAY_AFTER), and it goes on shielded
        and commits, guarded (src/graph/memory/folds.py).
        """
        refusal = None if media is not None else self.check_input(text, identity.language_code)
        if refusal is not None:
            return TurnResult(refusal, ok=False, stored=False)
        loop = asyncio.get_running_loop()
        result: asyncio.Future[TurnResult] = loop.create_future()
        task = asyncio.create_task(
            self._run_turn(identity, text, result, delivery, stream, media, sent_at)
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        with self.deps.replies.replying():  # memory calls wait for idle time meanwhile
            return await asyncio.shield(result)

    async def _run_turn(
        self,
        identity: Identity,
        text: str,
        result: asyncio.Future[TurnResult],
        delivery: Delivery | None = None,
        stream: TurnStream | None = None,
        media: MediaTurn | None = None,
        sent_at: datetime | None = None,
    ) -> None:
        started = time.perf_counter()
        lang = identity.language_code
        progress = {"stored": False}
        try:
            # The lock comes first: turns start in arrival order, and awaiting anything
            # before it would let two quick messages of one owner swap places.
            # The owner's row and conversation are read in the lease's round trip.
            along = functools.partial(
                send_turn_start,
                owner_id=identity.owner_id,
                username=identity.username,
                first_name=identity.first_name,
                language_code=lang,
                update_id=delivery.update_id if delivery is not None else None,
                checkpoints=isinstance(self.graph.checkpointer, PooledPostgresSaver),
                topic=identity.topic_id,
            )
            async with self.locks.hold(identity.owner_id, along) as start:
                assert start is not None
                moved_to = start.moved_to
                if moved_to is None:
                    await self._turn_locked(
                        identity,
                        text,
                        result,
                        started,
                        progress,
                        start,
                        delivery,
                        stream,
                        media,
                        sent_at,
                    )
            if moved_to is not None:
                # The group became a supergroup while this update waited (an update of
                # the old chat): the turn is the supergroup's (src/services/group_moves.py).
                moved = dataclasses.replace(identity, owner_id=moved_to)
                await self._run_turn(moved, text, result, delivery, stream, media, sent_at)
                return
        except DB_ERRORS:
            logger.error("database unavailable for a turn of %s", identity.owner_id, exc_info=True)
            if not result.done():
                stored = progress["stored"]
                answer = t("reply_failed" if stored else "store_error", lang)
                result.set_result(TurnResult(answer, ok=False, stored=stored))
        except Exception:
            logger.exception("turn of %s failed", identity.owner_id)
            if not result.done():
                result.set_result(TurnResult(t("internal_error", lang), ok=False))
        except asyncio.CancelledError:
            # After the reply: its memory work gave way (locks.give_way). Before it: the
            # service is shutting down, and the caller must not wait forever.
            if not result.done():
                result.cancel()
            raise
        finally:
            # Embeddings of the turn's messages are made after it, outside its lock.
            if self.embeddings is not None and progress["stored"]:
                self.embeddings.kick()

    async def _turn_locked(
        self,
        identity: Identity,
        text: str,
        result: asyncio.Future[TurnResult],
        started: float,
        progress: dict[str, bool],
        start: TurnStart,
        delivery: Delivery | None = None,
        stream: TurnStream | None = None,
        media: MediaTurn | None = None,
        sent_at: datetime | None = None,
    ) -> None:
        deps, lang = self.deps, identity.language_code
        now = deps.clock()
        zone = owner_zone(start.user, self.settings)
        model = self.model_of(start.user)
        # The owner's memory epoch, read with the lease: memory work this turn starts
        # stores nothing after a delete of memory that comes later (epoch.py).
        work = begin(MemoryEpoch(identity.owner_id, start.user.get("memory_epoch")))
        # One checkout for all: each costs the pool's connection check.
        async with deps.conversations.pool.connection() as conn:
            conversation = start.conversation or await deps.conversations.current(
                identity.owner_id, conn=conn, topic=identity.topic_id
            )
            conversation_id = uuid.UUID(str(conversation["id"]))
            row = await self._stored_message(conversation_id, start.stored_message_id, conn)
            if row is None:
                when = min(sent_at or now, now)
                said = stamp(text, when, self.settings, own_zone(start.user), lang)
                row = await self._store(
                    conversation_id, said, delivery, media, conn, identity.member_id
                )
        progress["stored"] = True
        refusal = await self.budget_refusal(identity)
        if refusal is not None:
            # Stored, and in the window (storing it advanced seed 000's counter); no
            # model is called, and the session is not compacted now: a later turn or job
            # does it.
            result.set_result(TurnResult(refusal, conversation_id=str(conversation_id)))
            return
        if self.compactor is not None and session_over(
            conversation, now, self.settings.session_idle_minutes
        ):
            # The silence before this message ended a session: its compact goes into
            # this very turn's prompt ("Previous conversations"), as plain text, with no
            # model call before the reply. The model's compact and the session's facts
            # come after this turn, its own memory work included (the same messages are
            # then not extracted twice).
            await self.compactor.end_session_now(
                identity.owner_id,
                conversation_id,
                until=conversation["last_message_at"],
                after=asyncio.current_task() or result,
            )
        state = turn_input(
            identity.owner_id,
            str(conversation_id),
            row,
            lang,
            model,
            member_id=identity.member_id,
            zone=zone.key,
            role=identity.role,
        )
        configurable: dict[str, Any] = {"thread_id": str(conversation_id)}
        if delivery is not None:
            configurable["delivery"] = delivery.as_config()
        if stream is not None:
            configurable["live"] = True
            deps.stops[identity.owner_id] = stream.stop
        if media is not None and media.images:
            configurable["images"] = media.images
        config: dict[str, Any] = {
            "configurable": configurable,
            "run_name": "turn",
            "metadata": turn_metadata(identity.owner_id, conversation_id, identity.sender_id),
        }
        # No callbacks for the run: the usage recorder is among each model's own (see
        # make_deps), and a run's callbacks make every node, edge and write of the graph
        # a traced run of its own: 2.5 ms of a 15 ms turn in the bench.
        outcome = TurnResult("", conversation_id=str(conversation_id))
        # save_response hands over the reply as soon as it is stored (see `_answer`).
        configurable["on_answered"] = functools.partial(
            self._answer, outcome, result=result, started=started
        )
        saver = self.graph.checkpointer
        thread_id = str(conversation_id)
        if isinstance(saver, PooledPostgresSaver) and start.conversation is not None:
            # Read with the lease: the run's first read need not look again.
            saver.confirm_latest(thread_id, start.latest_checkpoint_id)
        # The turn's checkpoints are written after its reply (see PooledPostgresSaver).
        deferred = (
            saver.deferred(thread_id)
            if isinstance(saver, PooledPostgresSaver)
            else contextlib.nullcontext()
        )
        turn_id = config["metadata"]["turn_id"]
        # The turn's usage records are written after its reply, like its checkpoints.
        held = (
            self.usage.recorder.holding(turn_id)
            if self.usage is not None
            else contextlib.nullcontext()
        )
        try:
            async with deferred:
                with held:
                    async for mode, chunk in self.graph.astream(
                        state, config, stream_mode=["updates", "custom"]
                    ):
                        if mode == "custom":
                            if stream is not None:
                                stream.relay(chunk)
                            continue
                        for node, values in chunk.items():
                            outcome.collect(values or {})
                            if node == "save_response":
                                self._answer(outcome, values or {}, result=result, started=started)
                                # What is left (facts, summary) marks messages only with
                                # its result: the owner's next turn may cancel it and redo
                                # it.
                                self.locks.give_way(identity.owner_id)
                                if self.usage is not None:
                                    self.usage.recorder.release(turn_id)
                                if isinstance(saver, PooledPostgresSaver):
                                    await saver.flush(thread_id)  # the reply's record, now
                                if work.deleted:
                                    # A tool deleted memory that the record just written
                                    # shows (the prompt's facts): out of it now, not
                                    # only when the memory work after the reply ends.
                                    await asyncio.shield(self.eraser.after_turn(thread_id, work))
        except OverBudget as exc:
            # The budget ran out half-way (tool rounds): the next call was not made.
            if not result.done():
                when = exc.resets_at.astimezone(zone)
                text = t("budget_ran_out", lang, when=f"{when:%Y-%m-%d %H:%M}")
                result.set_result(TurnResult(text, ok=False, conversation_id=str(conversation_id)))
            return
        except ModelFailure as exc:
            logger.warning("model failure in a turn of %s: %s", identity.owner_id, exc)
            if not result.done():
                text = failure_text(exc, model, lang)
                result.set_result(TurnResult(text, ok=False, conversation_id=str(conversation_id)))
            return
        finally:
            if stream is not None and deps.stops.get(identity.owner_id) is stream.stop:
                del deps.stops[identity.owner_id]
            if work.deleted:  # a tool deleted memory: out of the turn's own records too
                await asyncio.shield(self.eraser.after_turn(thread_id, work))
        logger.info(
            "turn user=%s conv=%s in=%d chars out=%d chars tools=%s tokens=%d/%d%s ctx=%d ms=%.1f",
            identity.owner_id,
            conversation_id,
            len(text),
            len(outcome.reply),
            ",".join(outcome.tools_used) or "-",
            outcome.tokens_in,
            outcome.tokens_out,
            " (estimated)" if outcome.tokens_estimated else "",
            outcome.context_tokens,
            outcome.ms,
        )

    async def budget_refusal(self, identity: Identity) -> str | None:
        """Return the sentence for an owner over their token budget (when it resets, in
        their zone), or None when they may call models (admins always may)."""
        if self.usage is None:
            return None
        who = (identity.owner_id, identity.sender_id)
        return await self.usage.budget.refusal(*who, identity.language_code)

    async def budget_warnings(self, identity: Identity) -> list[str]:
        """Return a sentence per budget of the owner or sender that is nearly spent
        (BUDGET_WARN_AT), each said once a period."""
        if self.usage is None:
            return []
        who = (identity.owner_id, identity.sender_id)
        return await self.usage.budget.warning_texts(*who, identity.language_code)

    async def _store(
        self,
        conversation_id: uuid.UUID,
        stamped: str,
        delivery: Delivery | None,
        media: MediaTurn | None,
        conn: Any,
        member: int = 0,
    ) -> dict[str, Any]:
        """Store the user's message (`stamped`: with its time stamp), linked to its
        update (and its album's others); in a group, with its author (meta `author`:
        the member's user id, from the update).

        Alone, the message is one statement, committed in its own round trip; with its
        update, the statements are pipelined in one transaction (two round trips: the
        links need the message's id).
        """
        conversations = self.deps.conversations
        meta = media.meta if media is not None and media.kinds else None
        if member:
            meta = {**(meta or {}), AUTHOR: member}
        if delivery is None:
            return await conversations.append_message(
                conversation_id, "user", stamped, meta=meta, conn=conn
            )
        async with conn.pipeline(), conn.transaction():
            row = await conversations.append_message(
                conversation_id, "user", stamped, meta=meta, conn=conn
            )
            await self.deps.delivery.record_message(delivery.update_id, row["id"], conn)
            if media is not None:
                await self.deps.delivery.consume(media.siblings, row["id"], conn)
        return row

    async def _stored_before(
        self, delivery: Delivery | None, conversation_id: uuid.UUID, conn: Any
    ) -> dict[str, Any] | None:
        """Return the user's message an earlier run of this update stored, if any."""
        if delivery is None:
            return None
        message_id = await self.deps.delivery.stored_message_id(delivery.update_id, conn)
        return await self._stored_message(conversation_id, message_id, conn)

    async def _stored_message(
        self, conversation_id: uuid.UUID, message_id: int | None, conn: Any
    ) -> dict[str, Any] | None:
        """Return the stored user message `message_id` (an earlier run of the update
        stored it), if it is still in the conversation."""
        if message_id is None:
            return None
        row = await self.deps.conversations.message(conversation_id, message_id, conn)
        if row is not None:
            logger.info("message %s runs again: its update came back", message_id)
        return row

    def _answer(
        self,
        outcome: TurnResult,
        values: dict[str, Any],
        *,
        result: asyncio.Future[TurnResult],
        started: float,
    ) -> None:
        """Hand the turn's caller its reply, once (`values`: save_response's), when it is
        stored: the step's own bookkeeping and what runs after it come later."""
        if result.done():
            return
        outcome.collect(values)
        outcome.ms = (time.perf_counter() - started) * 1000
        result.set_result(outcome)

    async def drain(self) -> None:
        """Wait until background work (summaries after replies) has finished."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        await self.deps.runs.drain()  # memory work that outlived its turn
        if self.compactor is not None:
            await self.compactor.drain()
        if self.usage is not None:
            await self.usage.recorder.drain()
