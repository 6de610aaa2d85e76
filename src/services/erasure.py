"""Deleting memory, and erasing everything of an owner: the one door every delete takes.

How to call it (`what` is one of src/storage/erasure_repo.py's `FactKey(key)`,
`CompactId(compact_id)`, `AllMemory()`, `MemberFacts(member)`, `Context(topic)` for
/forget):

    # A command or a button, outside a turn: takes the owner's turn lock itself.
    deleted = await service.eraser.delete(owner_id, FactKey("city"))        # -> Deleted
    deleted = await service.delete_memory(identity, CompactId(17))          # the same
    # A tool, inside the owner's turn (which holds the lock; the graph cannot import
    # services): src/graph/memory/epoch.py
    deleted = await delete_in_turn(deps, owner_id, FactKey("city"))
    # /erase, once confirmed (`current_update`: the Telegram update asking for it):
    erased = await service.eraser.erase(owner_id, current_update=update_id)  # -> Erased

`Deleted.facts` and `Deleted.compacts` say how many current facts and compacts went
(0: there was no such key or id); a fact goes with its history.

What a delete does, in order: takes the owner's turn lock (a turn of theirs, here or in
another process, finishes first; memory work after a reply gives way, see turn_lock.py);
writes what this process still holds of the owner's checkpoints; then, in one
transaction, moves the owner to a new memory epoch (memory work that started before it,
in this process or another, stores nothing from now on: src/storage/epochs.py), deletes
the rows and redacts them from the owner's checkpoints (checkpoint_redaction.py).
`/memory clear` (AllMemory) also ends the current session where it is and marks what was
said so far as done for facts: nothing said before it comes back as a fact or a compact.

`erase` does the same for everything the bot keeps about the owner (erasure_repo.py:
messages, summaries, facts and their history, compacts, embeddings, squash logs,
checkpoints, the chat's inbox and outbox rows, kept texts, the owner's row; usage stays
as daily totals, with the owner id only for the current budget month), and first cancels the owner's
memory work running in this process (the epoch stops the rest). A person's erase also
takes the turn lock of every group where memory about them as a member is kept or may
yet be made, and there does what their /memory clear as a member does (MemberFacts):
their facts go from the group's rows and checkpoints, their lines from its kept texts,
and their messages not extracted yet make no facts; the group's epoch moves, so its
memory work under way stores nothing it read before.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterable

from src.graph.deps import GraphDeps
from src.graph.memory.epoch import WorkEpoch
from src.services.budget import month_start
from src.services.texts import t
from src.services.turn_lock import TurnLocks
from src.storage.checkpoint_redaction import Needles
from src.storage.checkpointer import PooledPostgresSaver
from src.storage.erasure_repo import Deleted, Erased, ErasureRepository, Memory

logger = logging.getLogger(__name__)

# The keys of a conversation's memory work in GraphDeps.runs (memory_nodes.py).
RUN_KINDS = ("summary", "facts")
# What confirms /erase typed after it (`/erase yes`), in any channel.
CONFIRM_WORDS = ("yes", "да")


def erased_sentence(erased: Erased, lang: str | None) -> str:
    """Return the one sentence that confirms an erase, in the user's language."""
    return t(
        "erased",
        lang,
        messages=erased.count("messages"),
        facts=erased.count("facts"),
        compacts=erased.count("session_compacts"),
    )


class MemoryEraser:
    """Delete an owner's memory, or everything of an owner, under their turn lock."""

    def __init__(self, deps: GraphDeps, locks: TurnLocks, saver: object | None = None) -> None:
        self.deps = deps
        self.locks = locks
        self.saver = saver if isinstance(saver, PooledPostgresSaver) else None
        self.repo = ErasureRepository(deps.conversations.pool)

    async def delete(self, owner: int, what: Memory) -> Deleted:
        """Delete `what` of the owner's memory everywhere (see the module's doc)."""
        async with self.locks.hold(owner):
            await self._settle(await self.deps.conversations.conversation_ids(owner))
            deleted = await self.repo.delete(owner, what)
        logger.info(
            "deleted %s of %s: %d facts, %d compacts, %d checkpoint values redacted",
            type(what).__name__,
            owner,
            deleted.facts,
            deleted.compacts,
            deleted.redacted,
        )
        return deleted

    async def erase(self, owner: int, current_update: int | None = None) -> Erased:
        """Delete everything the bot keeps about the owner (see the module's doc)."""
        groups = await self.repo.member_groups(owner) if owner > 0 else []
        async with contextlib.AsyncExitStack() as held:
            # The owner's lock, then the groups' in id order (as every erase takes them).
            for locked in (owner, *groups):
                await held.enter_async_context(self.locks.hold(locked))
            conversations = await self.deps.conversations.conversation_ids(owner)
            cancelled = self.deps.runs.cancel(_run_keys(conversations))
            await self._settle(conversations)
            for group in groups:  # their turns' checkpoints, for the redaction
                await self._settle(await self.deps.conversations.conversation_ids(group))
            settings = self.deps.settings
            since = month_start(self.deps.clock(), settings)
            erased = await self.repo.erase(owner, since, settings.timezone, current_update)
        logger.info(
            "erased %s: %d messages, %d facts, %d compacts, %d checkpoint threads;"
            " %d memory runs cancelled",
            owner,
            erased.count("messages"),
            erased.count("facts"),
            erased.count("session_compacts"),
            erased.threads,
            cancelled,
        )
        return erased

    async def after_turn(self, thread_id: str, work: WorkEpoch) -> None:
        """Redact what deletes inside a turn removed (`work.deleted`, see epoch.py's
        `delete_in_turn`) from the owner's checkpoints again: the turn's own, written after
        the delete, hold it. A failure is logged: the turn is answered already."""
        needles = sum(work.deleted, Needles())
        try:
            if self.saver is not None:
                await self.saver.settle(thread_id)
            await self.repo.redact(work.epoch.owner, needles)
        except Exception:
            logger.error("redacting the checkpoints of %s failed", work.epoch.owner, exc_info=True)

    async def _settle(self, conversations: Iterable[uuid.UUID]) -> None:
        """Write what this process still holds of these threads' checkpoints (a turn's
        last writes may still be under way), so the delete finds them all."""
        if self.saver is None:
            return
        for conversation_id in conversations:
            await self.saver.settle(str(conversation_id))


def _run_keys(conversations: Iterable[uuid.UUID]) -> list[tuple[str, uuid.UUID]]:
    return [(kind, c) for c in conversations for kind in RUN_KINDS]
