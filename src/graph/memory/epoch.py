"""The memory epoch a piece of memory work started at, carried in its context.

Memory work outlives the owner's turn lock (the summary and facts after a reply run on,
shielded, see folds.py; a session end's model calls too), so a delete of memory
(src/services/erasure.py) may come between what the work read and what it writes. The
epoch is read where the work starts: a turn with its lease (AgentService), a session end
(Compactor), a try of kept facts (PendingFacts). It is set here, for the task and for
every task started from it (asyncio copies the context into them), and each write of a
result checks it in its own transaction (src/storage/epochs.py). Work that runs without
one (under the owner's lock, which no delete can pass) is not checked.

A delete inside a turn (a tool: `delete_in_turn`) moves the turn's own epoch along: what
the turn does afterwards read the memory after the delete. The turn's own checkpoints,
written after the delete, are redacted again at its reply (the record written then shows
the prompt from before the delete) and when it ends (AgentService).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from src.graph.deps import GraphDeps
from src.storage.epochs import MemoryEpoch, read_epoch
from src.storage.erasure_repo import Deleted, ErasureRepository, Memory


@dataclass
class WorkEpoch:
    """The epoch of the work running in this context (shared by the tasks it starts)."""

    epoch: MemoryEpoch
    deleted: list[Any] = field(default_factory=list)
    """What deletes inside this turn removed (their needles): the turn's own checkpoints,
    written after them, are redacted again at its end."""


_CURRENT: ContextVar[WorkEpoch | None] = ContextVar("memory_epoch", default=None)


def started(owner: int) -> MemoryEpoch | None:
    """Return the epoch the owner's memory work in this context started at (None: none
    was read, and the work is not checked)."""
    work = _CURRENT.get()
    return work.epoch if work is not None and work.epoch.owner == owner else None


def begin(epoch: MemoryEpoch) -> WorkEpoch:
    """Run the rest of the current task (and the tasks it starts) as memory work started
    at `epoch`: for a task of its own, such as a turn."""
    work = WorkEpoch(epoch)
    _CURRENT.set(work)
    return work


def current_work(owner: int) -> WorkEpoch | None:
    """Return the owner's work epoch of this context, if any."""
    work = _CURRENT.get()
    return work if work is not None and work.epoch.owner == owner else None


@contextlib.contextmanager
def working_from(epoch: MemoryEpoch) -> Iterator[WorkEpoch]:
    """Run the block (and the tasks it starts) as memory work started at `epoch`."""
    work = WorkEpoch(epoch)
    token = _CURRENT.set(work)
    try:
        yield work
    finally:
        _CURRENT.reset(token)


async def epoch_now(deps: GraphDeps, owner: int) -> MemoryEpoch:
    """Return the owner's epoch as memory work starting now sees it: the one this context
    already carries, else the one stored."""
    known = started(owner)
    if known is not None:
        return known
    async with deps.conversations.pool.connection() as conn:
        return await read_epoch(conn, owner)


def moved(epoch: MemoryEpoch, deleted: Any = None) -> None:
    """Tell this context's work that its owner moved to `epoch` by a delete it made
    itself (a tool in a turn): what it writes from now on was read after the delete.
    `deleted`: what to redact from the turn's checkpoints once they are written."""
    work = current_work(epoch.owner)
    if work is None:
        return
    work.epoch = epoch
    if deleted is not None:
        work.deleted.append(deleted)


async def delete_in_turn(deps: GraphDeps, owner: int, what: Memory) -> Deleted:
    """Delete `what` of the owner's memory from inside their turn (a tool; the turn holds
    the owner's lock): as src/services/erasure.py's `MemoryEraser.delete`, and the turn's
    own work goes on from the new epoch."""
    deleted = await ErasureRepository(deps.conversations.pool).delete(owner, what)
    if deleted.epoch is not None:
        moved(deleted.epoch, deleted.needles)
    return deleted
