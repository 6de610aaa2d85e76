"""LangGraph's Postgres checkpointer, shaped for turns: no global lock, no WAL flush, and
a turn's checkpoints written after its reply, in one transaction.

A checkpoint is the developer tools' record of a turn (`tgagent runs`, replay, the web
page), never what a turn needs to be answered: messages, replies and the inbox live in
our own tables, committed and flushed before the reply. So:

- Every write commits with `synchronous_commit` off: a crash of the database server may
  lose its last fraction of a second of checkpoints, never a message.
- Inside `deferred(thread_id)` (the service wraps each turn in it) the checkpoints and
  task writes of that thread are kept in memory, already serialized, and written by
  `flush`: the service flushes once the reply is out and again when the run ends. A
  turn then spends one round trip on checkpoints before its reply (reading the thread's
  last checkpoint) instead of two per graph step. A process killed mid-turn loses that
  turn's checkpoints; the turn itself runs again from the inbox.

Both hook into the saver's `_cursor`, the one place its writes take a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg_pool import AsyncConnectionPool, PoolTimeout

logger = logging.getLogger(__name__)

# For the rest of the transaction only.
ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"


@dataclass
class _Op:
    """One statement the saver asked for: executed later, in order."""

    query: Any
    params: Any
    many: bool


@dataclass
class _Pending:
    """A thread's deferred statements, and how many turns defer them."""

    ops: list[_Op] = field(default_factory=list)
    holders: int = 0
    closed: bool = False
    """No turn defers them any more: what still comes is written right away."""


class _Recorder:
    """Stands for the saver's cursor while its writes are deferred: keeps the statements
    (in the thread's list of the moment: a flush may have taken the previous one)."""

    def __init__(self, pending: _Pending) -> None:
        self.pending = pending

    async def execute(self, query: Any, params: Any = None, **_: Any) -> None:
        self.pending.ops.append(_Op(query, params, many=False))

    async def executemany(self, query: Any, params_seq: Any, **_: Any) -> None:
        self.pending.ops.append(_Op(query, list(params_seq), many=True))


# The deferred statements' thread of the write being made now (set around aput and
# aput_writes).
_RECORDING: contextvars.ContextVar[_Pending | None] = contextvars.ContextVar(
    "checkpoint_recording", default=None
)


class PooledPostgresSaver(AsyncPostgresSaver):
    """AsyncPostgresSaver over a pool: no process-wide lock, writes without a WAL flush,
    and deferrable per thread (see the module's doc).

    The saver serializes every checkpoint read and write behind one asyncio lock, which
    only a single shared connection needs; over a pool each call takes a connection of
    its own, so concurrent conversations need not queue behind each other.
    """

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        super().__init__(pool)
        self.pool = pool
        self.lock = contextlib.nullcontext()  # type: ignore[assignment]
        self._pending: dict[str, _Pending] = {}
        self.lost_writes = 0
        """Deferred checkpoint writes a flush could not store (logged)."""
        self._storing: set[asyncio.Future[None]] = set()

    @contextlib.asynccontextmanager
    async def deferred(self, thread_id: str) -> AsyncIterator[None]:
        """Keep the thread's checkpoint writes in memory until `flush` or the end."""
        pending = self._pending.setdefault(thread_id, _Pending())
        pending.holders += 1
        try:
            yield
        finally:
            pending.holders -= 1
            if pending.holders == 0 and self._pending.get(thread_id) is pending:
                del self._pending[thread_id]
                pending.closed = True
            await self._write(thread_id, pending)

    async def flush(self, thread_id: str) -> None:
        """Write the thread's deferred checkpoints now (one transaction)."""
        pending = self._pending.get(thread_id)
        if pending is not None:
            await self._write(thread_id, pending)

    async def _write(self, thread_id: str, pending: _Pending) -> None:
        ops, pending.ops = pending.ops, []
        if not ops:
            return
        # Shielded: the owner's next turn may cancel this one's work after the reply, and
        # the statements taken here must still be written.
        store = asyncio.ensure_future(self._store(thread_id, ops))
        self._storing.add(store)
        store.add_done_callback(self._storing.discard)
        await asyncio.shield(store)

    async def _store(self, thread_id: str, ops: list[_Op]) -> None:
        try:
            async with self.pool.connection() as conn, conn.pipeline():
                async with conn.transaction(), conn.cursor(binary=True) as cur:
                    await cur.execute(ASYNC_COMMIT)
                    for op in ops:
                        if op.many:
                            await cur.executemany(op.query, op.params)
                        else:
                            await cur.execute(op.query, op.params)
        except (psycopg.Error, PoolTimeout, OSError):
            # A record lost, never a message: the turn itself is stored and answered.
            self.lost_writes += len(ops)
            logger.warning("checkpoints of thread %s not stored", thread_id, exc_info=True)

    @contextlib.asynccontextmanager
    async def _recording(self, config: RunnableConfig) -> AsyncIterator[None]:
        """Defer the statements of one write if its thread is deferred."""
        thread_id = str(config["configurable"]["thread_id"])
        pending = self._pending.get(thread_id)
        token = _RECORDING.set(pending)
        try:
            yield
        finally:
            _RECORDING.reset(token)
            if pending is not None and pending.closed:
                await self._write(thread_id, pending)  # it came after the turn's end

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        async with self._recording(config):
            return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        async with self._recording(config):
            await super().aput_writes(config, writes, task_id, task_path)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        # What this process still holds for the thread is stored first.
        await self.flush(str(config["configurable"]["thread_id"]))
        return await super().aget_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        thread_id = ((config or {}).get("configurable") or {}).get("thread_id")
        for pending_thread in [str(thread_id)] if thread_id else list(self._pending):
            await self.flush(pending_thread)
        async for item in super().alist(config, filter=filter, before=before, limit=limit):
            yield item

    @contextlib.asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[Any]:
        recording = _RECORDING.get()
        if pipeline and recording is not None:
            yield _Recorder(recording)
            return
        async with super()._cursor(pipeline=pipeline) as cur:
            if not pipeline:  # reads, and the deletes that run their own transactions
                yield cur
                return
            async with cur.connection.transaction():
                await cur.execute(ASYNC_COMMIT)
                yield cur
