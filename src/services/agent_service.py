"""AgentService: one turn of a user's conversation, and the commands around it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from src.graph.conversation_state import turn_input
from src.graph.deps import GraphDeps
from src.graph.frs.compress import build_compress_graph, run_compression
from src.graph.memory.epoch import begin
from src.graph.memory.fact_keys import find_key
from src.graph.memory.window import window_size
from src.graph.model_calls import turn_metadata
from src.graph.nodes import ModelFailure
from src.graph.timestamps import stamp
from src.services.embedding_worker import EmbeddingWorker
from src.services.erasure import MemoryEraser
from src.services.export import ExportFile, MemoryExport
from src.services.media import MediaTurn
from src.services.texts import t
from src.services.turn_lock import TurnLocks
from src.services.usage import Usage
from src.storage.checkpointer import PooledPostgresSaver
from src.storage.delivery_repo import Delivery
from src.storage.epochs import MemoryEpoch
from src.storage.erasure_repo import AllMemory, CompactId, Deleted, Erased, FactKey, Memory
from src.storage.turn_reads import TurnStart, send_turn_start

logger = logging.getLogger(__name__)

DB_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)


@dataclass(frozen=True)
class Identity:
    """Whose memory a turn uses: a private chat's user, or a group chat."""

    owner_id: int
    username: str | None = None
    first_name: str | None = None
    language_code: str | None = None
    sender_id: int | None = None
    """Who wrote the message (in groups not the owner): an admin spends without budget."""


@dataclass
class TurnResult:
    """What one turn produced for the user."""

    reply: str
    ok: bool = True
    stored: bool = True
    conversation_id: str | None = None
    tools_used: list[str] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    context_tokens: int = 0
    ms: float = 0.0


@dataclass
class TurnStream:
    """Watch one turn live: the answer's text as the model writes it, the tools it runs,
    and a way to stop it (`stop.set()`: the answer so far becomes the reply)."""

    on_text: Callable[[str], None]
    """Called with each new piece of the answer's text."""
    on_tools: Callable[[list[str]], None]
    """Called with the names of the tools that run now; the text written before them
    was not the answer (the next piece starts it anew)."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class CompressResult:
    """What /compress did: how many messages and tokens the context is shorter by."""

    ok: bool = True
    compressible: int = 0
    compressions: int = 0
    messages_replaced: int = 0
    tokens_before: int = 0
    tokens_saved: int = 0
    reply: str = ""
    """The report for the user, in their language."""

    @property
    def messages_saved(self) -> int:
        """Messages fewer in the context: each compression turned a run into one."""
        return self.messages_replaced - self.compressions

    @property
    def tokens_after(self) -> int:
        """Tokens of the working memory after the compression (approximate)."""
        return max(0, self.tokens_before - self.tokens_saved)

    def text(self, language_code: str | None = None) -> str:
        """Return the report for the user, in their language."""
        if not self.ok:
            return t("compress_failed", language_code)
        if self.compressible < 2:
            return t("compress_nothing", language_code)
        if not self.compressions:
            return t("compress_declined", language_code)
        return t(
            "compress_report",
            language_code,
            messages=self.messages_saved,
            tokens=self.tokens_saved,
            before=self.tokens_before,
            after=self.tokens_after,
        )


def session_over(conversation: dict[str, Any], now: datetime, idle_minutes: float) -> bool:
    """Tell whether the conversation's current session ended by silence and is not yet
    ended (compacted) in memory."""
    last, ended = conversation.get("last_message_at"), conversation.get("ended_at")
    if last is None or (ended is not None and ended >= last):
        return False
    return now - last > timedelta(minutes=idle_minutes)


class AgentService:
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
    ) -> TurnResult:
        """Store the user's message, run the graph, and return the reply.

        With a `delivery` (a Telegram update from the inbox), the stored message is
        linked to the update and the reply is stored in the outbox in the reply's own
        transaction; the same update run again (its worker died) reuses the stored
        message instead of storing it twice. With a `stream`, the turn is watched live.
        With `media` (voice, photos, documents: `text` is then read from them), the
        message's meta says what it held, its photos go to the model, and an album's
        other updates are marked answered with it.

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
        task = asyncio.create_task(self._run_turn(identity, text, result, delivery, stream, media))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return await asyncio.shield(result)

    async def _run_turn(
        self,
        identity: Identity,
        text: str,
        result: asyncio.Future[TurnResult],
        delivery: Delivery | None = None,
        stream: TurnStream | None = None,
        media: MediaTurn | None = None,
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
            )
            async with self.locks.hold(identity.owner_id, along) as start:
                assert start is not None
                await self._turn_locked(
                    identity, text, result, started, progress, start, delivery, stream, media
                )
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
    ) -> None:
        deps, lang = self.deps, identity.language_code
        now = deps.clock()
        model = self.model_of(start.user)
        # The owner's memory epoch, read with the lease: memory work this turn starts
        # stores nothing after a delete of memory that comes later (epoch.py).
        work = begin(MemoryEpoch(identity.owner_id, start.user.get("memory_epoch")))
        # One checkout for all: each costs the pool's connection check.
        async with deps.conversations.pool.connection() as conn:
            conversation = start.conversation or await deps.conversations.current(
                identity.owner_id, conn=conn
            )
            conversation_id = uuid.UUID(str(conversation["id"]))
            row = await self._stored_message(conversation_id, start.stored_message_id, conn)
            if row is None:
                row = await self._store(conversation_id, text, now, delivery, media, conn)
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
        state = turn_input(identity.owner_id, str(conversation_id), row, lang, model)
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
            "metadata": turn_metadata(identity.owner_id, conversation_id),
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
                            self._relay(stream, chunk)
                            continue
                        for node, values in chunk.items():
                            self._collect(outcome, node, values or {})
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
        except ModelFailure as exc:
            logger.warning("model failure in a turn of %s: %s", identity.owner_id, exc)
            if not result.done():
                result.set_result(
                    TurnResult(
                        t("model_error", lang), ok=False, conversation_id=str(conversation_id)
                    )
                )
            return
        finally:
            if stream is not None and deps.stops.get(identity.owner_id) is stream.stop:
                del deps.stops[identity.owner_id]
            if work.deleted:  # a tool deleted memory: out of the turn's own records too
                await asyncio.shield(self.eraser.after_turn(thread_id, work))
        logger.info(
            "turn user=%s conv=%s in=%d chars out=%d chars tools=%s tokens=%d/%d ctx=%d ms=%.1f",
            identity.owner_id,
            conversation_id,
            len(text),
            len(outcome.reply),
            ",".join(outcome.tools_used) or "-",
            outcome.tokens_in,
            outcome.tokens_out,
            outcome.context_tokens,
            outcome.ms,
        )

    async def budget_refusal(self, identity: Identity) -> str | None:
        """Return the sentence for an owner over their token budget (when it resets, in
        TIMEZONE), or None when they may call models (admins always may)."""
        if self.usage is None:
            return None
        resets = await self.usage.budget.resets_at(identity.owner_id, identity.sender_id)
        if resets is None:
            return None
        local = resets.astimezone(self.settings.zone)
        logger.info("user %s is over the token budget until %s", identity.owner_id, local)
        return t("over_budget", identity.language_code, when=f"{local:%Y-%m-%d %H:%M}")

    async def _store(
        self,
        conversation_id: uuid.UUID,
        text: str,
        now: datetime,
        delivery: Delivery | None,
        media: MediaTurn | None,
        conn: Any,
    ) -> dict[str, Any]:
        """Store the user's message, linked to its update (and its album's others).

        Alone, the message is one statement, committed in its own round trip; with its
        update, the statements are pipelined in one transaction (two round trips: the
        links need the message's id).
        """
        conversations = self.deps.conversations
        stamped = stamp(text, now, self.settings)
        meta = media.meta if media is not None and media.kinds else None
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

    def model_of(self, user: dict[str, Any] | None) -> str:
        """Return the model that answers the owner: their /model choice while it is still
        offered, else LLM_MODEL."""
        chosen = (user or {}).get("model")
        return chosen if chosen in self.settings.choices else self.settings.llm_model

    async def current_model(self, identity: Identity) -> str:
        """Return the model that answers the owner now."""
        return self.model_of(await self.deps.users.get(identity.owner_id))

    async def set_model(self, identity: Identity, name: str) -> bool:
        """Make `name` (one of the offered models) answer the owner from the next turn;
        return False when it is not offered."""
        if name not in self.settings.choices:
            return False
        deps = self.deps
        await deps.users.get_or_create(
            identity.owner_id, identity.username, identity.first_name, identity.language_code
        )
        await deps.users.set_model(
            identity.owner_id, None if name == self.settings.llm_model else name
        )
        return True

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

    async def remember(
        self,
        identity: Identity,
        text: str,
        delivery: Delivery | None = None,
        media: MediaTurn | None = None,
    ) -> None:
        """Store a user's message without answering it: it waited too long for a turn,
        or it brought documents to ask about later. An update stored before (its worker
        died) is not stored twice."""
        deps = self.deps
        await deps.users.get_or_create(
            identity.owner_id, identity.username, identity.first_name, identity.language_code
        )
        async with self.locks.hold(identity.owner_id):
            async with deps.conversations.pool.connection() as conn:
                conversation = await deps.conversations.current(identity.owner_id, conn=conn)
                conversation_id = uuid.UUID(str(conversation["id"]))
                if await self._stored_before(delivery, conversation_id, conn) is None:
                    await self._store(conversation_id, text, deps.clock(), delivery, media, conn)
        if self.embeddings is not None:
            self.embeddings.kick()

    @staticmethod
    def _relay(stream: TurnStream | None, event: Any) -> None:
        """Pass what the agent node writes as it goes to whoever watches the turn."""
        if stream is None or not isinstance(event, dict):
            return
        if "text" in event:
            stream.on_text(event["text"])
        elif "tools" in event:
            stream.on_tools(list(event["tools"]))

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
        self._collect(outcome, "save_response", values)
        outcome.ms = (time.perf_counter() - started) * 1000
        result.set_result(outcome)

    @staticmethod
    def _collect(outcome: TurnResult, node: str, values: dict[str, Any]) -> None:
        if "reply" in values:
            outcome.reply = values["reply"]
        if "tools_used" in values:
            outcome.tools_used = list(values["tools_used"])
        if "context_tokens" in values:
            outcome.context_tokens = values["context_tokens"]
        if "usage" in values:
            outcome.tokens_in = values["usage"].get("input", 0)
            outcome.tokens_out = values["usage"].get("output", 0)

    async def drain(self) -> None:
        """Wait until background work (summaries after replies) has finished."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        await self.deps.runs.drain()  # memory work that outlived its turn
        if self.compactor is not None:
            await self.compactor.drain()
        if self.usage is not None:
            await self.usage.recorder.drain()

    # --- commands ----------------------------------------------------------------

    async def new_conversation(self, identity: Identity) -> uuid.UUID:
        """/new: compact the current session, wipe the user's conversations, start anew.

        The facts not extracted yet are kept before the wipe and extracted until that
        succeeds (see src/services/pending_facts.py): a failing model loses none.
        """
        deps = self.deps
        await deps.users.get_or_create(
            identity.owner_id, identity.username, identity.first_name, identity.language_code
        )
        async with self.locks.hold(identity.owner_id):
            old = await deps.conversations.conversation_ids(identity.owner_id)
            if self.compactor is not None:
                # Facts and the compact are read before the wipe; slow models finish
                # in the background from what was read and kept.
                for conversation_id in old:
                    await self.compactor.end_session(
                        identity.owner_id, conversation_id, keep_facts=True
                    )
            new_id = await deps.conversations.create_new_conversation(identity.owner_id)
            await deps.users.set_active_messages_count(identity.owner_id, None)
            if self.checkpointer is not None:
                for conversation_id in old:
                    await self.checkpointer.adelete_thread(str(conversation_id))
        return new_id

    async def forget(self, identity: Identity) -> None:
        """/forget: empty context from now on, history kept, reminders off (seed 000).

        What it forgets makes nothing long-term either: the messages not summarized and
        not fact-extracted yet are marked done without a model reading them (a password
        said before /forget never becomes a fact).
        """
        deps = self.deps
        await deps.users.get_or_create(
            identity.owner_id, identity.username, identity.first_name, identity.language_code
        )
        async with self.locks.hold(identity.owner_id):
            conversation_id = await deps.conversations.get_or_create_conversation(identity.owner_id)
            async with deps.conversations.pool.connection() as conn, conn.transaction():
                await deps.users.forget(identity.owner_id, conn=conn)
                # The forgotten part is never summarized into later context either.
                await deps.conversations.forget_summary(conversation_id, conn=conn)
                await deps.conversations.skip_facts(conversation_id, conn=conn)

    async def toggle_mute(self, identity: Identity) -> bool:
        """/mute: flip reminders; return whether they are now on."""
        user = await self.deps.users.get_or_create(
            identity.owner_id, identity.username, identity.first_name, identity.language_code
        )
        enabled = user["remind_of_yourself"] == "0"
        await self.deps.users.set_reminders(identity.owner_id, enabled)
        return enabled

    async def memory_report(self, identity: Identity) -> dict[str, Any]:
        """Return what is kept about the owner: window, summary, every current fact
        (with the value it replaced), past sessions."""
        deps = self.deps
        user = await deps.users.get(identity.owner_id)
        ids = await deps.conversations.conversation_ids(identity.owner_id)
        conv = await deps.conversations.get_conversation(ids[0]) if ids else None
        stored = await deps.conversations.count_messages(ids[0]) if ids else 0
        return {
            "window": window_size(
                user["active_messages_count"] if user else None, self.settings.max_context
            ),
            "stored_messages": stored,
            "summary": conv["summary"] if conv else "",
            "facts": await deps.memory.facts_with_previous(identity.owner_id),
            "compacts": await deps.memory.list_compacts(
                identity.owner_id, self.settings.max_compacts
            ),
            "reminders": user is not None and user["remind_of_yourself"] != "0",
        }

    async def compact_idle_sessions(
        self,
        now: datetime | None = None,
        limit: int = 100,
        admits: Callable[[int], bool] | None = None,
    ) -> int:
        """End the sessions silent for SESSION_IDLE_MINUTES (a job); return how many.

        Each under its owner's turn lock, so a message arriving meanwhile waits and then
        finds the session ended. The conversations stay open: a user coming back
        continues where they left off, in a new session. Owners `admits` refuses (the
        allowlist no longer names them) are left as they are: no model call, no write.
        """
        if self.compactor is None:
            return 0
        deps = self.deps
        now = now or deps.clock()
        ended = 0
        for row in await self._idle_conversations(now, limit, admits):
            owner, conversation_id = row["telegram_user_id"], uuid.UUID(str(row["id"]))
            try:
                async with self.locks.hold(owner):
                    # Read again under the lock: the user may have come back.
                    conversation = await deps.conversations.get_conversation(conversation_id)
                    if conversation is None or not session_over(
                        conversation, now, self.settings.session_idle_minutes
                    ):
                        continue
                    await self.compactor.end_session(
                        owner, conversation_id, until=conversation["last_message_at"]
                    )
                    ended += 1
            except Exception:
                logger.error("ending the idle session of %s failed", owner, exc_info=True)
        return ended

    async def _idle_conversations(
        self, now: datetime, limit: int, admits: Callable[[int], bool] | None
    ) -> list[dict[str, Any]]:
        """Return up to `limit` idle conversations of admitted owners within their token
        budget, oldest first.

        Refused owners' conversations stay idle forever, and over-budget ones until their
        budget resets: paging past them keeps them from filling every batch.
        """
        cutoff = now - timedelta(minutes=self.settings.session_idle_minutes)
        found: list[dict[str, Any]] = []
        after: dict[str, Any] | None = None
        while len(found) < limit:
            page = await self.deps.memory.idle_conversations(cutoff, limit, after=after)
            found += [r for r in page if await self._may_end(r["telegram_user_id"], admits)]
            if len(page) < limit:
                break
            after = page[-1]
        return found[:limit]

    async def _may_end(self, owner: int, admits: Callable[[int], bool] | None) -> bool:
        """Tell whether an idle session of `owner` may be ended (compacted) now."""
        if admits is not None and not admits(owner):
            return False
        return self.compactor is None or await self.compactor.allows(owner)

    @functools.cached_property
    def compress_graph(self) -> Any:
        """The /compress graph, compiled on first use."""
        return build_compress_graph(self.deps)

    async def compress(self, identity: Identity, focus: str | None = None) -> CompressResult:
        """/compress [focus]: let the model compress the older part of the conversation.

        Runs under the owner's turn lock, on the same working window a turn would see;
        every squash is logged as requested by "user:/compress". Failures change nothing.
        """
        deps = self.deps
        started = time.perf_counter()
        try:
            await deps.users.get_or_create(
                identity.owner_id, identity.username, identity.first_name, identity.language_code
            )
            refusal = await self.budget_refusal(identity)
            if refusal is not None:
                return CompressResult(reply=refusal)
            async with self.locks.hold(identity.owner_id):
                conversation_id = await deps.conversations.get_or_create_conversation(
                    identity.owner_id
                )
                user = await deps.users.get(identity.owner_id)
                window = window_size(
                    user["active_messages_count"] if user else None, self.settings.max_context
                )
                # The window as a turn shows it (the summary folds ahead, so its older
                # part may be in the summary too: a squash of that part stays summarized).
                rows = await deps.conversations.load_last_messages(conversation_id, window)
                outcome = await run_compression(
                    deps, self.compress_graph, identity.owner_id, conversation_id, rows, focus
                )
        except Exception:
            logger.exception("/compress of %s failed", identity.owner_id)
            failed = CompressResult(ok=False)
            failed.reply = failed.text(identity.language_code)
            return failed
        result = CompressResult(
            compressible=outcome.compressible,
            compressions=outcome.compressions,
            messages_replaced=outcome.replaced,
            tokens_before=outcome.tokens_before,
            tokens_saved=outcome.tokens_saved,
        )
        result.reply = result.text(identity.language_code)
        logger.info(
            "compress user=%s conv=%s squashes=%d messages=%d tokens=%d->%d ms=%.1f",
            identity.owner_id,
            conversation_id,
            result.compressions,
            result.messages_replaced,
            result.tokens_before,
            result.tokens_after,
            (time.perf_counter() - started) * 1000,
        )
        return result

    async def forget_fact(self, identity: Identity, key: str) -> str | None:
        """/memory forget KEY (and its button): delete, everywhere, the owner's fact the
        user means by `key` ("City" is `city`) with its history; return its key, or None
        when no current fact is called so."""
        found = find_key(key, await self.deps.memory.fact_keys(identity.owner_id, None))
        if found is None or not (await self.delete_memory(identity, FactKey(found))).facts:
            return None
        return found

    async def forget_compact(self, identity: Identity, compact_id: int) -> bool:
        """Delete, everywhere, one compact of the owner's previous conversations (its
        /memory button); return whether there was one."""
        return (await self.delete_memory(identity, CompactId(compact_id))).compacts > 0

    @functools.cached_property
    def eraser(self) -> MemoryEraser:
        """Every delete of memory, and /erase (src/services/erasure.py)."""
        return MemoryEraser(self.deps, self.locks, self.checkpointer)

    async def delete_memory(self, identity: Identity, what: Memory) -> Deleted:
        """Delete a fact, a compact or all memory of the owner, everywhere (erasure.py)."""
        return await self.eraser.delete(identity.owner_id, what)

    async def clear_memory(self, identity: Identity) -> tuple[int, int]:
        """/memory clear: delete the owner's facts (with their history) and compacts
        everywhere; return how many."""
        deleted = await self.delete_memory(identity, AllMemory())
        return deleted.facts, deleted.compacts

    async def erase(self, identity: Identity, current_update: int | None = None) -> Erased:
        """/erase, confirmed: delete everything the bot keeps about the owner."""
        return await self.eraser.erase(identity.owner_id, current_update)

    async def export(self, identity: Identity) -> list[ExportFile]:
        """/export: everything the bot keeps about the owner, as JSON and Markdown files."""
        return await MemoryExport(self.deps).files(identity.owner_id, identity.language_code)
