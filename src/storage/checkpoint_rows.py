"""The rows of PooledPostgresSaver (src/storage/checkpointer.py): its SQL, the compressing
serializer, channel versions, what stays inline, and the writes a turn keeps until its
reply is out (see the saver's module doc for why each exists).
"""

from __future__ import annotations

import contextvars
import logging
import math
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    CheckpointMetadata,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import CipherProtocol, SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import TASKS

logger = logging.getLogger(__name__)

# For the rest of the transaction only.
ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"
# Serialized values this long or longer are compressed; shorter ones would barely shrink.
COMPRESS_FROM = 256
# zlib's default level: a turn's context (about 26 KB serialized) in 0.07 ms, 6% smaller
# than the fastest level (0.03 ms).
COMPRESS_LEVEL = 6
# Values whose JSON is at most this long (numbers, short texts, small lists and dicts of
# them) stay inline in the checkpoint; longer ones are blobs, stored once per version.
INLINE_TEXT = 64
# The channel of a row holding a task's small writes: [[idx, channel, value], ...].
PACKED = "__tgagent_writes__"
# Writes serialized to this many bytes or more keep a row of their own (a blob may refer
# to it); smaller ones are packed.
OWN_ROW_FROM = COMPRESS_FROM
# How many (thread, channel, version) of texts stored as blobs a saver remembers: a text
# that did not change is stored again only if it is not among them (and then the insert
# does nothing if another process stored it).
TEXTS_KEPT = 4096
# The type of a blob stored as a reference to a task write: ref:<checkpoint>:<task>:<idx>.
REF = "ref:"
# How many threads' last checkpoints (as read back by a turn's last write) a saver keeps
# for their next turn's start.
LATEST_KEPT = 1024

# LangGraph's query (langgraph.checkpoint.postgres.base.SELECT_SQL), with references
# resolved (a blob of type `ref:...` reads the value of the write it names), and each
# channel's blob found by its key. LangGraph's join let the planner read every blob of
# the thread into a hash table (it estimates one row per thread while the tables are new
# and not analyzed): work that grew with the conversation, 4.6 ms at turn 300 of the
# bench. `LIMIT 1` keeps each lookup a subquery of its own, an index probe per channel.
SELECT_SQL = """
select
    thread_id,
    checkpoint,
    checkpoint_ns,
    checkpoint_id,
    parent_checkpoint_id,
    metadata,
    (
        select array_agg(array[
            bl.channel::bytea, coalesce(cw.type, bl.type)::bytea, coalesce(cw.blob, bl.blob)
        ])
        from jsonb_each_text(checkpoint -> 'channel_versions') v
        cross join lateral (
            select b.thread_id, b.checkpoint_ns, b.channel, b.type, b.blob
            from checkpoint_blobs b
            where b.thread_id = checkpoints.thread_id
                and b.checkpoint_ns = checkpoints.checkpoint_ns
                and b.channel = v.key
                and b.version = v.value
            limit 1
        ) bl
        left join lateral (
            select w.type, w.blob
            from checkpoint_writes w
            where w.thread_id = bl.thread_id
                and w.checkpoint_ns = bl.checkpoint_ns
                and w.checkpoint_id = split_part(bl.type, ':', 2)
                and w.task_id = split_part(bl.type, ':', 3)
                and w.idx = case when starts_with(bl.type, 'ref:')
                                 then split_part(bl.type, ':', 4)::int end
            limit 1
        ) cw on starts_with(bl.type, 'ref:')
    ) as channel_values,
    (
        select
        array_agg(array[cw.task_id::text::bytea, cw.channel::bytea, cw.type::bytea, cw.blob,
                        convert_to(cw.task_path, 'UTF8'), cw.idx::text::bytea])
        from checkpoint_writes cw
        where cw.thread_id = checkpoints.thread_id
            and cw.checkpoint_ns = checkpoints.checkpoint_ns
            and cw.checkpoint_id = checkpoints.checkpoint_id
    ) as pending_writes
from checkpoints """

LATEST_WHERE = "WHERE thread_id = %s AND checkpoint_ns = %s ORDER BY checkpoint_id DESC LIMIT 1"
# The id of a thread's last checkpoint: an index's first entry, planned in no time.
SELECT_LATEST_ID = "SELECT checkpoint_id FROM checkpoints " + LATEST_WHERE
# The same for a memory owner's current conversation (its thread), read with the turn's
# lease (`src/storage/turn_reads.py`); see `confirm_latest`.
SELECT_OWNERS_LATEST_ID = """
SELECT checkpoint_id FROM checkpoints
WHERE thread_id = (
    SELECT id::text FROM conversations WHERE telegram_user_id = %s AND topic_id = %s
    ORDER BY created_at DESC, id DESC LIMIT 1
) AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1
"""

# A reference to a write about to be deleted takes the write's value (`tgagent db prune`).
RESOLVE_REFS = """
UPDATE checkpoint_blobs b SET type = w.type, blob = w.blob
FROM checkpoint_writes w
WHERE b.thread_id = %(thread)s AND b.checkpoint_ns = '' AND starts_with(b.type, 'ref:')
  AND w.thread_id = b.thread_id AND w.checkpoint_ns = b.checkpoint_ns
  AND w.checkpoint_id = split_part(b.type, ':', 2)
  AND w.task_id = split_part(b.type, ':', 3)
  AND w.idx::text = split_part(b.type, ':', 4)
  AND w.checkpoint_id = ANY(%(checkpoints)s)
"""


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
    """Return the channel version after `current`: 13 characters, `1`, a counter (6 base-36
    digits) and a random part (6 base-36 digits).

    Versions compare as strings, so a saver that continues a thread of ours (a replay's
    in-memory one) must make them the same way. The leading `1` sorts them after the
    versions of a thread written before: LangGraph's (51 characters) and tgagent's earlier
    ones (`0000000042.9f3c01ab`), which all start with `0`.
    """
    if current is None:
        counter = 0
    elif isinstance(current, int):
        counter = current
    elif "." in current:  # written before: a decimal counter, a dot, the rest
        counter = int(current.split(".")[0])
    else:
        counter = int(current[1:7], 36)
    # The random part tells apart the versions of two forks of a thread (a replay): their
    # values are stored under (thread, channel, version).
    return "1" + _base36(counter + 1, 6) + _base36(random.getrandbits(31), 6)


_DIGITS36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(number: int, width: int) -> str:
    """Return `number` in `width` base-36 digits, which sort as the numbers do."""
    if not 0 <= number < 36**width:
        raise ValueError(f"{number} does not fit {width} base-36 digits")
    digits = []
    for _ in range(width):
        number, digit = divmod(number, 36)
        digits.append(_DIGITS36[digit])
    return "".join(reversed(digits))


def _inline(value: Any) -> bool:
    """Tell whether a channel value stays inline in the checkpoint (else it is a blob):
    what JSON gives back as it was, and short."""
    if value is None or isinstance(value, (int, float, bool)):
        return True  # as AsyncPostgresSaver keeps them
    return _json_size(value, INLINE_TEXT) <= INLINE_TEXT


def _json_size(value: Any, budget: int) -> int:
    """Return the size of `value` as JSON, or more than `budget` once it exceeds it or is
    not plain JSON (which would not read back as the same value)."""
    kind = type(value)
    if value is None or kind is bool:
        return 5
    if kind is int or (kind is float and math.isfinite(value)):
        return len(repr(value))
    if kind is str:
        return len(value) + 2
    if kind is list:
        size = 2
        for item in value:
            size += _json_size(item, budget - size) + 1
            if size > budget:
                return size
        return size
    if kind is dict:
        size = 2
        for key, item in value.items():
            if type(key) is not str:
                return budget + 1
            size += len(key) + 4 + _json_size(item, budget - size)
            if size > budget:
                return size
        return size
    return budget + 1


def _metadata(
    thread_id: str, config: RunnableConfig, metadata: CheckpointMetadata
) -> dict[str, Any]:
    """Return a checkpoint's metadata as stored: the run's, without the conversation id
    a turn's run carries (for its model calls' usage), which is the thread's."""
    stored = dict(get_serializable_checkpoint_metadata(config, metadata))
    if stored.get("conversation_id") == thread_id:
        del stored["conversation_id"]
    return stored


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
    later: bool = False
    """`params` is a function that makes them: values are serialized when the statement
    is written (after the reply), not while the turn waits for it."""

    def made(self) -> _Op:
        """Return the statement with its parameters made."""
        if not self.later:
            return self
        return _Op(self.query, self.params(), self.many)


@dataclass
class _Pending:
    """A thread's deferred statements, and how many turns defer them."""

    ops: list[_Op] = field(default_factory=list)
    holders: int = 0
    closed: bool = False
    """No turn defers them any more: what still comes is written right away."""
    written_at: str | None = None
    """The checkpoint whose task writes `written` holds."""
    written: dict[str, list[tuple[Any, str, bytes, str, int]]] = field(default_factory=dict)
    """Long task writes of that checkpoint, by channel: (value, type, bytes, task, idx);
    the next checkpoint stores a channel value that is one of them as a reference: the
    very object (a LastValue channel holds what was written), or the same bytes (a
    reducer's result equal to the write)."""


class _Recorder:
    """Stands for the saver's cursor while its writes are deferred: keeps the statements
    (in the thread's list of the moment: a flush may have taken the previous one)."""

    def __init__(self, pending: _Pending) -> None:
        self.pending = pending

    async def execute(self, query: Any, params: Any = None, **_: Any) -> None:
        self.pending.ops.append(_Op(query, params, many=False))

    async def executemany(self, query: Any, params_seq: Any, **_: Any) -> None:
        self.pending.ops.append(_Op(query, list(params_seq), many=True))

    def later(self, query: Any, make: Any, many: bool) -> None:
        """Keep a statement whose parameters `make()` makes when it is written."""
        self.pending.ops.append(_Op(query, make, many, later=True))


# The deferred statements' thread of the write being made now (set around aput and
# aput_writes).
_RECORDING: contextvars.ContextVar[_Pending | None] = contextvars.ContextVar(
    "checkpoint_recording", default=None
)


def blob_rows(
    serde: SerializerProtocol,
    thread_id: str,
    ns: str,
    parent: str | None,
    values: dict[str, Any],
    versions: ChannelVersions,
    pending: _Pending | None,
) -> list[tuple[str, str, str, str, str, bytes | None]]:
    written = pending.written if pending is not None and pending.written_at == parent else {}
    rows: list[tuple[str, str, str, str, str, bytes | None]] = []
    for channel, version in versions.items():
        value, candidates = values[channel], written.get(channel, ())
        # The same object serializes to the same bytes: no need to serialize it.
        found = next((w for w in candidates if w[0] is value), None)
        kind, data = ("", None) if found else serde.dumps_typed(value)
        if found is None and candidates:
            found = next((w for w in candidates if w[1] == kind and w[2] == data), None)
        if found is not None:
            kind, data = f"{REF}{parent}:{found[3]}:{found[4]}", None
        rows.append((thread_id, ns, channel, str(version), kind, data))
    if pending is not None and pending.written_at == parent:
        pending.written_at, pending.written = None, {}
    return rows


def task_rows(
    serde: SerializerProtocol,
    head: tuple[str, str, str, str, str],
    writes: Sequence[tuple[str, Any]],
    pending: _Pending | None,
) -> list[tuple[str, str, str, str, str, int, str, str, bytes]]:
    """Return the rows of a task's writes (`head`: thread, namespace, checkpoint, task,
    path); a deferred thread's `pending` notes the long ones, for references."""
    checkpoint_id, task_id = head[2], head[3]
    if pending is not None and pending.written_at != checkpoint_id:
        pending.written_at, pending.written = checkpoint_id, {}
    rows: list[tuple[str, str, str, str, str, int, str, str, bytes]] = []
    small: list[tuple[int, str, Any, str, bytes]] = []
    for idx, (channel, value) in enumerate(writes):
        kind, data = serde.dumps_typed(value)
        if channel in WRITES_IDX_MAP or channel == TASKS:
            rows.append((*head, WRITES_IDX_MAP.get(channel, idx), channel, kind, data))
        elif len(data) >= OWN_ROW_FROM:
            rows.append((*head, idx, channel, kind, data))
            if pending is not None:
                entry = (value, kind, data, task_id, idx)
                pending.written.setdefault(channel, []).append(entry)
        else:
            small.append((idx, channel, value, kind, data))
    if len(small) == 1:
        idx, channel, _, kind, data = small[0]
        rows.append((*head, idx, channel, kind, data))
    elif small:
        packed = [[idx, channel, value] for idx, channel, value, _, _ in small]
        rows.append((*head, small[0][0], PACKED, *serde.dumps_typed(packed)))
    return rows


def load_writes(
    serde: SerializerProtocol, writes: list[tuple[bytes, bytes, bytes, bytes, bytes, bytes]] | None
) -> list[tuple[str, str, Any]]:
    """Read a checkpoint's task writes, a packed row as the writes it holds."""
    loaded: list[tuple[tuple[Any, ...], str, str, Any]] = []
    for task, channel, kind, data, path, idx in writes or []:
        task_id, task_path = task.decode(), path.decode()
        value = serde.loads_typed((kind.decode(), data))
        if channel.decode() == PACKED:
            for i, name, item in value:
                loaded.append((writes_sort_key(task_path, task_id, i), task_id, name, item))
        else:
            key = writes_sort_key(task_path, task_id, int(idx))
            loaded.append((key, task_id, channel.decode(), value))
    loaded.sort(key=lambda w: w[0])
    return [(task_id, channel, value) for _, task_id, channel, value in loaded]


def load_blobs(
    serde: SerializerProtocol, blob_values: list[tuple[bytes, bytes, bytes]]
) -> dict[str, Any]:
    # A reference whose write is gone (a flush that failed) reads as no value.
    return {
        k.decode(): serde.loads_typed((t.decode(), v))
        for k, t, v in blob_values or []
        if t.decode() != "empty" and not t.decode().startswith(REF)
    }
