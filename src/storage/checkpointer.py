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

Two things make a turn's checkpoints smaller (about half):

- Serialized values of COMPRESS_FROM bytes or more are zlib-compressed (`checkpoint_serde`,
  through the serializer's cipher hook: the type column says `msgpack+zlib`, values
  written before are read as they are). A turn's context, its messages, is most of what
  a checkpoint carries, and text compresses.
- Channel versions are 19 characters (`0000000042.9f3c01ab`: counter, random part)
  instead of 51: every checkpoint lists the version of every channel and what each node
  has seen. They still sort after the long ones a thread wrote before.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import random
import zlib
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
from langgraph.checkpoint.serde.base import CipherProtocol, SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from psycopg_pool import AsyncConnectionPool, PoolTimeout

logger = logging.getLogger(__name__)

# For the rest of the transaction only.
ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"
# Serialized values this long or longer are compressed; shorter ones would barely shrink.
COMPRESS_FROM = 256
# zlib's fastest level: a turn's context (about 10 KB) in well under a millisecond, and
# within a few percent of the default level's size on chat text.
COMPRESS_LEVEL = 1


class ZlibCodec(CipherProtocol):
    """Compression as the checkpoint serializer's cipher: `zlib` for long values, `raw`
    for short ones."""

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        if len(plaintext) < COMPRESS_FROM:
            return "raw", plaintext
        return "zlib", zlib.compress(plaintext, COMPRESS_LEVEL)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        if ciphername == "raw":
            return ciphertext
        if ciphername == "zlib":
            return zlib.decompress(ciphertext)
        raise ValueError(f"unknown checkpoint encoding {ciphername!r}")


def next_version(current: str | int | None) -> str:
    """Return the channel version after `current`: a counter and a random part, 19 chars.

    Versions compare as strings, so a saver that continues a thread of ours (a replay's
    in-memory one) must make them the same way: LangGraph's own 51-character versions
    would sort before these.
    """
    if current is None:
        counter = 0
    elif isinstance(current, int):
        counter = current
    else:
        counter = int(current.split(".")[0])
    # The random part tells apart the versions of two forks of a thread (a replay): their
    # values are stored under (thread, channel, version).
    return f"{counter + 1:010}.{random.getrandbits(32):08x}"


def checkpoint_serde() -> SerializerProtocol:
    """Return the serializer of tgagent's checkpoints (LangGraph's own, compressed);
    whatever reads them needs it."""
    return EncryptedSerializer(ZlibCodec(), JsonPlusSerializer())


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
        super().__init__(pool, serde=checkpoint_serde())
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

    def get_next_version(self, current: str | None, channel: None) -> str:
        return next_version(current)

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
