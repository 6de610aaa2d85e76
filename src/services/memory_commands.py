"""The commands around a turn (`/new`, `/forget`, `/mute`, `/memory`, `/compress`, `/model`,
`/erase`, `/export`, idle sessions), as a part of AgentService (src/services/agent_service.py)."""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from src.config import Settings
from src.graph.deps import GraphDeps
from src.graph.frs.compress import build_compress_graph, run_compression
from src.graph.memory.fact_keys import find_key
from src.graph.memory.idle import urgent
from src.graph.memory.window import window_count, window_size
from src.graph.timestamps import own_zone, owner_zone, stamp
from src.services.embedding_worker import EmbeddingWorker
from src.services.erasure import MemoryEraser
from src.services.export import ExportFile, MemoryExport
from src.services.media import MediaTurn
from src.services.turn_lock import TurnLocks
from src.services.turn_types import CompressResult, Identity, session_over
from src.services.usage import Usage
from src.storage.delivery_repo import Delivery
from src.storage.erasure_repo import (
    AllMemory,
    CompactId,
    Context,
    Deleted,
    Erased,
    FactKey,
    MemberFacts,
    Memory,
)

logger = logging.getLogger(__name__)


class MemoryCommands:
    """AgentService's commands; the turn itself is in agent_service.py."""

    if TYPE_CHECKING:
        deps: GraphDeps
        settings: Settings
        locks: TurnLocks
        compactor: Any
        checkpointer: Any
        embeddings: EmbeddingWorker | None
        usage: Usage | None

        async def budget_refusal(self, identity: Identity) -> str | None: ...

        async def _stored_before(
            self, delivery: Delivery | None, conversation_id: uuid.UUID, conn: Any
        ) -> dict[str, Any] | None: ...

        async def _store(
            self,
            conversation_id: uuid.UUID,
            stamped: str,
            delivery: Delivery | None,
            media: MediaTurn | None,
            conn: Any,
            member: int = 0,
        ) -> dict[str, Any]: ...

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

    async def remember(
        self,
        identity: Identity,
        text: str,
        delivery: Delivery | None = None,
        media: MediaTurn | None = None,
        sent_at: datetime | None = None,
    ) -> None:
        """Store a user's message without answering it: it waited too long for a turn,
        or it brought documents to ask about later. An update stored before (its worker
        died) is not stored twice. `sent_at`: when Telegram says it was sent."""
        deps = self.deps
        user = await deps.users.get_or_create(
            identity.owner_id, identity.username, identity.first_name, identity.language_code
        )
        now = deps.clock()
        when = min(sent_at or now, now)
        stamped = stamp(text, when, self.settings, own_zone(user), identity.language_code)
        async with self.locks.hold(identity.owner_id):
            async with deps.conversations.pool.connection() as conn:
                conversation = await deps.conversations.current(
                    identity.owner_id, conn=conn, topic=identity.topic_id
                )
                conversation_id = uuid.UUID(str(conversation["id"]))
                if await self._stored_before(delivery, conversation_id, conn) is None:
                    await self._store(
                        conversation_id, stamped, delivery, media, conn, identity.member_id
                    )
        if self.embeddings is not None:
            self.embeddings.kick()

    # --- commands ----------------------------------------------------------------

    async def new_conversation(self, identity: Identity) -> uuid.UUID:
        """/new: compact the current session, wipe the conversations of the identity's
        topic (other topics keep theirs), start anew there.

        The facts not extracted yet are kept before the wipe and extracted until that
        succeeds (see src/services/pending_facts.py): a failing model loses none.
        """
        deps = self.deps
        await deps.users.get_or_create(
            identity.owner_id, identity.username, identity.first_name, identity.language_code
        )
        async with self.locks.hold(identity.owner_id):
            old = await deps.conversations.conversation_ids(
                identity.owner_id, topic=identity.topic_id
            )
            if self.compactor is not None:
                # Facts and the compact are read before the wipe; slow models finish
                # in the background from what was read and kept. The user waits for
                # them (the next prompt carries the facts): no idle time is waited for.
                with urgent():
                    for conversation_id in old:
                        await self.compactor.end_session(
                            identity.owner_id, conversation_id, keep_facts=True
                        )
            new_id = await deps.conversations.create_new_conversation(
                identity.owner_id, topic=identity.topic_id
            )
            if not identity.topic_id:  # a topic's new conversation starts with its own
                await deps.users.set_active_messages_count(identity.owner_id, None)
            if self.checkpointer is not None:
                for conversation_id in old:
                    await self.checkpointer.adelete_thread(str(conversation_id))
        return new_id

    async def end_topic_session(self, identity: Identity) -> int:
        """A topic was closed: end its session now (facts, compact), keeping the
        conversation (a reopened topic continues it); return how many sessions ended."""
        if self.compactor is None or not identity.topic_id:
            return 0
        conversations, ended = self.deps.conversations, 0
        async with self.locks.hold(identity.owner_id):
            for conversation_id in await conversations.conversation_ids(
                identity.owner_id, topic=identity.topic_id
            ):
                row = await conversations.get_conversation(conversation_id) or {}
                last, compacted = row.get("last_message_at"), row.get("ended_at")
                if last is None or (compacted is not None and compacted >= last):
                    continue  # nothing said, or its session is compacted already
                await self.compactor.end_session(identity.owner_id, conversation_id, until=last)
                ended += 1
        return ended

    async def forget(self, identity: Identity) -> None:
        """/forget: empty context from now on, history kept, reminders off (seed 000).

        What it forgets makes nothing long-term either: the messages not summarized and
        not fact-extracted yet are marked done without a model reading them, memory
        work under way (here or in another process) stores nothing it read before (a
        password said before /forget never becomes a fact), and the current session ends
        here without a compact (forget_summary), so no later compact reads them. It takes
        the door every delete of memory takes (erasure.py).
        """
        await self.deps.users.get_or_create(
            identity.owner_id, identity.username, identity.first_name, identity.language_code
        )
        await self.delete_memory(identity, Context(identity.topic_id))

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
        (with the value it replaced; in a group the group's and the asking member's,
        never another member's), past sessions."""
        deps = self.deps
        user = await deps.users.get(identity.owner_id)
        ids = await deps.conversations.conversation_ids(identity.owner_id, topic=identity.topic_id)
        conv = await deps.conversations.get_conversation(ids[0]) if ids else None
        stored = await deps.conversations.count_messages(ids[0]) if ids else 0
        window = window_size(window_count(user, conv), self.settings.max_context)
        return {
            "window": window,
            "in_window": min(window, stored),
            "stored_messages": stored,
            "summary": conv["summary"] if conv else "",
            "facts": await deps.memory.facts_with_previous(
                identity.owner_id, members=sorted({0, identity.member_id})
            ),
            "compacts": await deps.memory.list_compacts(
                identity.owner_id, self.settings.max_compacts
            ),
            "reminders": user is not None and user["remind_of_yourself"] != "0",
            "zone": owner_zone(user, self.settings),
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
                    identity.owner_id, topic=identity.topic_id
                )
                user = await deps.users.get(identity.owner_id)
                conversation = await deps.conversations.get_conversation(conversation_id)
                window = window_size(window_count(user, conversation), self.settings.max_context)
                # The window as a turn shows it (the summary folds ahead, so its older
                # part may be in the summary too: a squash of that part stays summarized).
                rows = await deps.conversations.load_last_messages(conversation_id, window)
                outcome = await run_compression(
                    deps,
                    self.compress_graph,
                    identity.owner_id,
                    conversation_id,
                    rows,
                    focus,
                    role=identity.role,
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

    async def forget_fact(
        self, identity: Identity, key: str, whose: Sequence[int] = (0,)
    ) -> str | None:
        """/memory forget KEY (and its button): delete, everywhere, the fact the user
        means by `key` ("City" is `city`) with its history, looked for among the facts
        of `whose` in order (a group's member ids, 0: the owner's own); return its key,
        or None when no current fact is called so."""
        for member in whose:
            found = await self.fact_named(identity, key, member)
            if found is None:
                continue
            if (await self.delete_memory(identity, FactKey(found, member))).facts:
                return found
        return None

    async def fact_named(self, identity: Identity, key: str, member: int = 0) -> str | None:
        """Return the key of the current fact of the owner's `member` (0: the owner's own)
        the user means by `key`, or None."""
        keys = await self.deps.memory.fact_keys(identity.owner_id, None, member=member)
        return find_key(key, keys)

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

    async def clear_member_facts(self, identity: Identity) -> int:
        """/memory clear by a group's member: delete their own facts (with their history)
        everywhere, and what they said so far makes no facts later; return how many."""
        return (await self.delete_memory(identity, MemberFacts(identity.member_id))).facts

    async def erase(self, identity: Identity, current_update: int | None = None) -> Erased:
        """/erase, confirmed: delete everything the bot keeps about the owner."""
        return await self.eraser.erase(identity.owner_id, current_update)

    async def export(self, identity: Identity) -> list[ExportFile]:
        """/export: everything the bot keeps about the owner, as JSON and Markdown files."""
        return await MemoryExport(self.deps).files(identity.owner_id, identity.language_code)
