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
- A turn's last write reads the thread's last checkpoint back in its own transaction (no
  round trip of its own, after the reply), and the thread's next turn starts from it once
  an index shows it is still the last one (`aget_tuple`): another process, a replay or
  `/new` may have written or deleted the thread since, and then it reads the database.

Both hook into the saver's `_cursor`, the one place its writes take a connection.

What makes a turn's checkpoints small:

- Serialized values of COMPRESS_FROM bytes or more are zlib-compressed (`checkpoint_serde`,
  through the serializer's cipher hook: the type column says `msgpack+zlib`, values
  written before are read as they are). A turn's context, its messages, is most of what
  a checkpoint carries, and text compresses.
- Channel versions are 13 characters (`100001a0k3x9c`: counter, random part) instead of 51:
  every checkpoint lists the version of every channel and what each node has seen. They
  still sort after the longer ones a thread wrote before.
- Values whose JSON is longer than INLINE_TEXT characters are stored once per version, as
  blobs, not inline in every checkpoint that follows (the stock saver inlines every string:
  the user's message and the reply were repeated in each of a turn's checkpoints); short
  lists and dicts of plain values stay inline instead of costing a blob row each.
- A task's small writes share one row (channel PACKED) instead of a row each: a row costs
  about 190 bytes of keys (thread, checkpoint, task, path) before its value, and a turn's
  nodes write some 30 small fields. Long values keep a row of their own.
- A channel value that is the very value a task of the parent checkpoint wrote (a turn's
  context: build_context writes it, the next checkpoint holds it) is stored as a reference
  to that write (type `ref:<checkpoint>:<task>:<idx>`), resolved by the read's own query.
  `tgagent db prune` turns a reference back into the value before it deletes the write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from src.storage.checkpoint_rows import (
    _RECORDING,
    ASYNC_COMMIT,
    LATEST_KEPT,
    LATEST_WHERE,
    SELECT_LATEST_ID,
    SELECT_SQL,
    TEXTS_KEPT,
    _inline,
    _metadata,
    _Op,
    _Pending,
    _Recorder,
    blob_rows,
    checkpoint_serde,
    load_blobs,
    load_writes,
    next_version,
    task_rows,
)

logger = logging.getLogger(__name__)


class PooledPostgresSaver(AsyncPostgresSaver):
    """AsyncPostgresSaver over a pool: no process-wide lock, writes without a WAL flush,
    deferrable per thread, and smaller rows (see the module's doc).

    The saver serializes every checkpoint read and write behind one asyncio lock, which
    only a single shared connection needs; over a pool each call takes a connection of
    its own, so concurrent conversations need not queue behind each other.
    """

    SELECT_SQL = SELECT_SQL

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        super().__init__(pool, serde=checkpoint_serde())
        self.pool = pool
        self.lock = contextlib.nullcontext()  # type: ignore[assignment]
        self._pending: dict[str, _Pending] = {}
        self.lost_writes = 0
        """Deferred checkpoint writes a flush could not store (logged)."""
        self._storing: dict[str, set[asyncio.Future[None]]] = {}
        """Writes under way, by thread."""
        self._texts: dict[tuple[str, str, str], None] = {}
        """(thread, channel, version) of the texts this saver stored as blobs lately."""
        self._latest: dict[str, DictRow] = {}
        """Threads' last checkpoints as a turn's last write read them back (the read's
        row), each for the thread's next read of its last checkpoint, once."""
        self._confirmed: dict[str, str] = {}
        """Threads' last checkpoint ids as a turn read them before its run (see
        `confirm_latest`), each for the thread's next read of its last checkpoint, once."""

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
        """Write the thread's deferred checkpoints now (one transaction), and wait for the
        thread's writes already under way: a read after it finds them all."""
        pending = self._pending.get(thread_id)
        if pending is not None:
            await self._write(thread_id, pending)
        storing = self._storing.get(thread_id)
        if storing:
            await asyncio.wait(list(storing))  # not cancelled with the caller

    async def _write(self, thread_id: str, pending: _Pending) -> None:
        taken, pending.ops = pending.ops, []
        if not taken:
            return
        try:
            # In order, here: a write's serialized values are what the next refers to.
            ops = [op.made() for op in taken]
        except Exception:
            self.lost_writes += len(taken)
            logger.warning("checkpoints of thread %s not serialized", thread_id, exc_info=True)
            return
        # Shielded: the owner's next turn may cancel this one's work after the reply, and
        # the statements taken here must still be written.
        store = asyncio.ensure_future(self._store(thread_id, ops, latest=pending.closed))
        storing = self._storing.setdefault(thread_id, set())
        storing.add(store)

        def done(_: asyncio.Future[None]) -> None:
            storing.discard(store)
            if not storing and self._storing.get(thread_id) is storing:
                del self._storing[thread_id]

        store.add_done_callback(done)
        await asyncio.shield(store)

    async def _store(self, thread_id: str, ops: list[_Op], latest: bool = False) -> None:
        """Execute deferred statements in one transaction; with `latest` (a turn's last
        write), read the thread's last checkpoint back in it too, for the next turn's start
        (see `aget_tuple`): the same round trip, after the reply."""
        self._latest.pop(thread_id, None)
        try:
            async with self.pool.connection() as conn, conn.pipeline():
                cur = conn.cursor(binary=True)
                try:
                    async with conn.transaction():
                        await cur.execute(ASYNC_COMMIT)
                        for op in ops:
                            if op.many:
                                await cur.executemany(op.query, op.params)
                            else:
                                await cur.execute(op.query, op.params)
                        if latest:
                            await cur.execute(
                                self.SELECT_SQL + LATEST_WHERE, (thread_id, ""), prepare=False
                            )
                    # Committed: the read's result came back with the commit.
                    row = await cur.fetchone() if latest else None
                finally:
                    await cur.close()
        except (psycopg.Error, PoolTimeout, OSError):
            # A record lost, never a message: the turn itself is stored and answered.
            self.lost_writes += len(ops)
            logger.warning("checkpoints of thread %s not stored", thread_id, exc_info=True)
            return
        if row is not None:
            self._latest[thread_id] = row
            if len(self._latest) > LATEST_KEPT:
                del self._latest[next(iter(self._latest))]

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
        """Store a checkpoint as AsyncPostgresSaver does, with long texts as blobs and
        values a task of the parent checkpoint wrote as references (see the module's doc).

        Serialized in the event loop: the values are a turn's, small, and a thread hop
        per call cost more than they do.
        """
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf["checkpoint_ns"]
        parent = conf.get("checkpoint_id")
        self._latest.pop(thread_id, None)  # the thread's last checkpoint is another now
        copy = checkpoint.copy()
        inline = copy["channel_values"] = dict(checkpoint["channel_values"])
        blobs: dict[str, Any] = {}
        for k, v in checkpoint["channel_values"].items():
            if isinstance(v, _DeltaSnapshot):
                blobs[k] = inline.pop(k)
                inline[k] = True
            elif not _inline(v):
                blobs[k] = inline.pop(k)
        pending = self._pending.get(thread_id)
        versions = {k: v for k, v in new_versions.items() if k in blobs}
        for k, v in blobs.items():
            version = checkpoint["channel_versions"].get(k)
            # An unchanged text: stored as a blob when it changed, unless a version of
            # tgagent that kept texts inline wrote it (the insert does nothing if stored).
            if isinstance(v, str) and k not in versions and version is not None:
                if (thread_id, k, str(version)) not in self._texts:
                    versions[k] = version
        for k, version in versions.items():
            if isinstance(blobs[k], str):
                self._texts[(thread_id, k, str(version))] = None
                if len(self._texts) > TEXTS_KEPT:
                    del self._texts[next(iter(self._texts))]

        def rows() -> list[tuple[str, str, str, str, str, bytes | None]]:
            return blob_rows(self.serde, thread_id, ns, parent, blobs, versions, pending)

        def row() -> tuple[Any, ...]:
            meta = _metadata(thread_id, config, metadata)
            return (thread_id, ns, checkpoint["id"], parent, Jsonb(copy), Jsonb(meta))

        async with self._recording(config), self._cursor(pipeline=True) as cur:
            if isinstance(cur, _Recorder):
                if versions:
                    cur.later(self.UPSERT_CHECKPOINT_BLOBS_SQL, rows, many=True)
                cur.later(self.UPSERT_CHECKPOINTS_SQL, row, many=False)
            else:
                if versions:
                    await cur.executemany(self.UPSERT_CHECKPOINT_BLOBS_SQL, rows())
                await cur.execute(self.UPSERT_CHECKPOINTS_SQL, row())
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes as AsyncPostgresSaver does, its small ones in one row."""
        conf = config["configurable"]
        thread_id, ns, checkpoint_id = (
            str(conf["thread_id"]),
            conf["checkpoint_ns"],
            conf["checkpoint_id"],
        )
        self._latest.pop(thread_id, None)  # its writes may be the last checkpoint's
        if all(w[0] in WRITES_IDX_MAP for w in writes):
            query = self.UPSERT_CHECKPOINT_WRITES_SQL
            rows = self._dump_writes(thread_id, ns, checkpoint_id, task_id, task_path, writes)
            async with self._recording(config), self._cursor(pipeline=True) as cur:
                await cur.executemany(query, rows)
            return

        pending = self._pending.get(thread_id)

        def rows_of_task() -> list[tuple[str, str, str, str, str, int, str, str, bytes]]:
            head = (thread_id, ns, checkpoint_id, task_id, task_path)
            return task_rows(self.serde, head, writes, pending)

        query = self.INSERT_CHECKPOINT_WRITES_SQL
        async with self._recording(config), self._cursor(pipeline=True) as cur:
            if isinstance(cur, _Recorder):
                cur.later(query, rows_of_task, many=True)
            else:
                await cur.executemany(query, rows_of_task())

    async def _load_checkpoint_tuple(self, value: DictRow) -> CheckpointTuple:
        # As AsyncPostgresSaver's, without a thread hop to read the writes.
        conf = {
            "thread_id": value["thread_id"],
            "checkpoint_ns": value["checkpoint_ns"],
            "checkpoint_id": value["checkpoint_id"],
        }
        parent = value["parent_checkpoint_id"]
        checkpoint = cast(Checkpoint, dict(value["checkpoint"]))
        checkpoint["channel_values"] = {
            **(checkpoint.get("channel_values") or {}),
            **load_blobs(self.serde, value["channel_values"]),
        }
        return CheckpointTuple(
            {"configurable": conf},
            checkpoint,
            value["metadata"],
            {"configurable": {**conf, "checkpoint_id": parent}} if parent else None,
            load_writes(self.serde, value["pending_writes"]),
        )

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Read a checkpoint as AsyncPostgresSaver does, planned at every read.

        The pool prepares every statement, and PostgreSQL then keeps one plan for it: made
        while a new database's tables were nearly empty, that plan scanned ever more rows
        as a conversation grew (the read took 0.8 ms at turn 1 of the bench and 2.1 ms at
        turn 300). Planned afresh it takes 0.2 ms at either. A turn's start needs none of
        that when the thread's previous turn read its last checkpoint back (`_store`) and it
        is still the last one: 0.1 ms instead of 0.8 in the bench.
        """
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        # What this process still holds for the thread is stored first.
        await self.flush(thread_id)
        checkpoint_id = get_checkpoint_id(config)
        args: tuple[Any, ...] = (thread_id, conf.get("checkpoint_ns", ""))
        value = None
        if checkpoint_id:
            args = (*args, checkpoint_id)
            where = "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
        else:
            where = LATEST_WHERE
            value = await self._kept_latest(thread_id, args)
        if value is None:
            async with self._cursor() as cur:
                await cur.execute(self.SELECT_SQL + where, args, binary=True, prepare=False)
                value = await cur.fetchone()
        if value is None:
            return None
        if value["checkpoint"]["v"] < 4 and value["parent_checkpoint_id"]:
            # Written by a LangGraph before checkpoint format 4: its own migration.
            return await super().aget_tuple(config)
        return await self._load_checkpoint_tuple(value)

    async def adelete_thread(self, thread_id: str) -> None:
        self._latest.pop(str(thread_id), None)
        await super().adelete_thread(thread_id)

    async def settle(self, thread_id: str) -> None:
        """Write what this process still holds of the thread, and forget the last
        checkpoint it kept in memory: its stored record is about to be redacted or
        deleted (src/storage/checkpoint_redaction.py), and must be read again."""
        await self.flush(thread_id)
        self._latest.pop(str(thread_id), None)
        self._confirmed.pop(str(thread_id), None)

    def confirm_latest(self, thread_id: str, checkpoint_id: str | None) -> None:
        """Tell the saver the id of the thread's last checkpoint, just read in another
        round trip (a turn reads it with its lease: SELECT_OWNERS_LATEST_ID): the thread's
        next read of its last checkpoint then uses the one this saver kept, if that is
        it, without looking again."""
        if checkpoint_id is None or str(thread_id) not in self._latest:
            return
        self._confirmed[str(thread_id)] = checkpoint_id
        if len(self._confirmed) > LATEST_KEPT:
            del self._confirmed[next(iter(self._confirmed))]

    async def _kept_latest(self, thread_id: str, args: tuple[Any, ...]) -> DictRow | None:
        """Return the thread's last checkpoint as this saver read it back after writing it,
        if it is still the last one (any process, any run may have written one since):
        one look at an index instead of the read, its planning and its blob lookups, and
        not even that when the id was just read elsewhere (`confirm_latest`)."""
        kept = self._latest.pop(thread_id, None)
        confirmed = self._confirmed.pop(thread_id, None)
        if kept is None or args[1] != "":
            return None
        if confirmed == kept["checkpoint_id"]:
            return kept
        async with self._cursor() as cur:
            await cur.execute(SELECT_LATEST_ID, args)
            row = await cur.fetchone()
        return kept if row is not None and row["checkpoint_id"] == kept["checkpoint_id"] else None

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
