"""Take deleted memory out of an owner's checkpoints: every line that holds it is redacted.

A checkpoint is the developers' record of a turn (`tgagent runs show`, replay, the web
page), and it records what the model was sent: the system prompt's memory section with
its `- key: value` fact lines and its "Previous conversations" lines, and tool results
that quoted them. We chose to redact the stored values rather than stop storing memory
text in checkpoints: a record that shows what the model really saw (minus what was
deleted since) is what `runs show` and replay are for, and rendering memory from the
tables at read time would show today's memory beside an old turn.

What a delete removed becomes `Needles`: the texts that identify it (a fact's
`key: value`, a compact's summary). Each line of a stored string that holds one is
replaced by REDACTED. The owner's checkpoint values are read back (zlib and msgpack, as
`checkpoint_serde` wrote them), and the ones that change are written again, in the
delete's transaction: the blobs, the task writes (a packed row's writes included), and
the checkpoints' inline values and metadata. A value that cannot be read back and
rewritten is dropped instead (logged): a record loses a value, never keeps a deleted one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb
from pydantic import BaseModel

from src.storage.checkpoint_rows import REF, ZlibCodec, checkpoint_serde

logger = logging.getLogger(__name__)

REDACTED = "[deleted]"
# Shorter texts would match too much that was never deleted.
MIN_NEEDLE = 4
# A compact is known by the start of its summary: a line cut to its layer's budget keeps
# the start.
COMPACT_NEEDLE_CHARS = 80

# The owner's threads: their conversations'. A thread is a conversation, and /new
# deletes the old ones' threads with them.
CONVERSATION_THREADS = """
SELECT id::text AS thread_id FROM conversations WHERE telegram_user_id = %(owner)s
"""
# ... and, for /erase, any other a turn of theirs wrote (its run's metadata names the
# owner): one that /new failed to delete. It reads every checkpoint's metadata.
OWNER_THREADS = """
SELECT id::text AS thread_id FROM conversations WHERE telegram_user_id = %(owner)s
UNION
SELECT DISTINCT thread_id FROM checkpoints WHERE metadata ->> 'owner_id' = %(owner)s::text
"""
HAS_CHECKPOINTS = "SELECT to_regclass('checkpoints') IS NOT NULL AS present"
SELECT_BLOBS = """
SELECT thread_id, checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs
WHERE thread_id = ANY(%s) AND blob IS NOT NULL
"""
UPDATE_BLOB = """
UPDATE checkpoint_blobs SET type = %s, blob = %s
WHERE thread_id = %s AND checkpoint_ns = %s AND channel = %s AND version = %s
"""
SELECT_WRITES = """
SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, type, blob FROM checkpoint_writes
WHERE thread_id = ANY(%s) AND blob IS NOT NULL
"""
UPDATE_WRITE = """
UPDATE checkpoint_writes SET type = %s, blob = %s
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s AND task_id = %s AND idx = %s
"""
DELETE_WRITE = """
DELETE FROM checkpoint_writes
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s AND task_id = %s AND idx = %s
"""
SELECT_CHECKPOINTS = """
SELECT thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata FROM checkpoints
WHERE thread_id = ANY(%s)
"""
UPDATE_CHECKPOINT = """
UPDATE checkpoints SET checkpoint = %s, metadata = %s
WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s
"""


@dataclass(frozen=True)
class Needles:
    """Texts that identify deleted memory; a line holding one is redacted."""

    texts: tuple[str, ...] = ()

    @classmethod
    def of(cls, texts: Iterable[str]) -> Needles:
        """Return the needles among `texts`: long enough to mean something, each once."""
        kept = {t for t in (str(x).strip() for x in texts) if len(t) >= MIN_NEEDLE}
        # One that REDACTED holds would be found again in every line it replaced.
        return cls(tuple(sorted(t for t in kept if t not in REDACTED)))

    def __add__(self, other: Needles) -> Needles:
        return Needles.of(self.texts + other.texts)

    def __bool__(self) -> bool:
        return bool(self.texts)

    def found_in(self, text: str) -> bool:
        """Tell whether `text` holds any of them."""
        return any(t in text for t in self.texts)

    def found_in_bytes(self, raw: bytes) -> bool:
        """Tell whether serialized bytes (msgpack keeps strings as UTF-8) hold any."""
        return any(t.encode() in raw for t in self.texts)

    def redact(self, text: str) -> str:
        """Return `text` with each line that holds a needle replaced by REDACTED."""
        pos = 0
        while True:
            found = [(i, t) for t in self.texts if (i := text.find(t, pos)) >= 0]
            if not found:
                return text
            start, needle = min(found)
            begin = text.rfind("\n", 0, start) + 1
            end = text.find("\n", start + len(needle))
            end = len(text) if end < 0 else end
            text = text[:begin] + REDACTED + text[end:]
            pos = begin + len(REDACTED)


def fact_needles(rows: Iterable[dict[str, Any]]) -> Needles:
    """Return the needles of facts (every row of their keys): `key: value` as the prompt
    and the fact tools render it."""
    return Needles.of(f"{r['key']}: {r['value']}" for r in rows)


def compact_needles(rows: Iterable[dict[str, Any]]) -> Needles:
    """Return the needles of session compacts: the start of each summary, and its last
    action."""
    texts: list[str] = []
    for row in rows:
        texts.append(" ".join(str(row.get("summary") or "").split())[:COMPACT_NEEDLE_CHARS])
        texts.append(str(row.get("last_action") or ""))
    return Needles.of(texts)


def redact_value(value: Any, needles: Needles) -> Any:
    """Return `value` with its strings redacted; the very object when nothing changed.

    Walks strings, lists, tuples, dicts, pydantic models (LangChain's messages) and
    dataclasses; anything else is returned as it is.
    """
    if isinstance(value, str):
        return needles.redact(value) if needles.found_in(value) else value
    if isinstance(value, list | tuple):
        items = [redact_value(v, needles) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else _rebuild_tuple(value, items)
    if isinstance(value, dict):
        changed = {k: n for k, v in value.items() if (n := redact_value(v, needles)) is not v}
        return {**value, **changed} if changed else value
    if isinstance(value, BaseModel):
        fields = {k: getattr(value, k) for k in type(value).model_fields}
        changed = {k: n for k, v in fields.items() if (n := redact_value(v, needles)) is not v}
        return value.model_copy(update=changed) if changed else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
        changed = {k: n for k, v in fields.items() if (n := redact_value(v, needles)) is not v}
        return dataclasses.replace(value, **changed) if changed else value
    return value


def _rebuild_tuple(value: tuple[Any, ...], items: list[Any]) -> tuple[Any, ...]:
    if hasattr(value, "_fields"):  # a named tuple
        return type(value)(*items)
    return tuple(items)


class Redactor:
    """Rewrite one owner's checkpoint rows without the needles, in the caller's
    transaction."""

    def __init__(self, needles: Needles) -> None:
        self.needles = needles
        self.serde = checkpoint_serde()
        self.codec = ZlibCodec()
        self.rewritten = 0
        self.dropped = 0

    def _raw(self, kind: str, blob: bytes) -> bytes:
        """Return a stored value's serialized bytes (decompressed)."""
        if "+" not in kind:
            return bytes(blob)
        return self.codec.decrypt(kind.split("+", 1)[1], bytes(blob))

    def rewrite(self, kind: str, blob: bytes) -> tuple[str, bytes] | None:
        """Return the value stored as (`kind`, `blob`) without the needles, serialized:
        the same pair when it holds none; None when it must be dropped."""
        if kind.startswith(REF) or kind == "empty":
            return kind, blob
        try:
            if not self.needles.found_in_bytes(self._raw(kind, blob)) and not kind.startswith(
                "json"
            ):
                return kind, blob
            value = self.serde.loads_typed((kind, bytes(blob)))
            redacted = redact_value(value, self.needles)
            if redacted is value:
                return kind, blob
            kind2, blob2 = self.serde.dumps_typed(redacted)
            if self.needles.found_in_bytes(self._raw(kind2, blob2)):
                raise ValueError("a deleted text is still in the value")
        except Exception:
            logger.warning("a checkpoint value could not be redacted: dropped", exc_info=True)
            self.dropped += 1
            return None
        self.rewritten += 1
        return kind2, blob2

    async def threads(self, conn: Any, thread_ids: list[str]) -> None:
        """Redact every stored value of these threads."""
        if not thread_ids or not self.needles:
            return
        await self._blobs(conn, thread_ids)
        await self._writes(conn, thread_ids)
        await self._checkpoints(conn, thread_ids)

    async def _blobs(self, conn: Any, thread_ids: list[str]) -> None:
        rows = await (await conn.execute(SELECT_BLOBS, (thread_ids,))).fetchall()
        for row in rows:
            new = self.rewrite(row["type"], row["blob"])
            if new == (row["type"], row["blob"]):
                continue
            kind, blob = new if new is not None else ("empty", None)
            key = (row["thread_id"], row["checkpoint_ns"], row["channel"], row["version"])
            await conn.execute(UPDATE_BLOB, (kind, blob, *key))

    async def _writes(self, conn: Any, thread_ids: list[str]) -> None:
        rows = await (await conn.execute(SELECT_WRITES, (thread_ids,))).fetchall()
        for row in rows:
            new = self.rewrite(row["type"], row["blob"])
            if new == (row["type"], row["blob"]):
                continue
            key = (
                row["thread_id"],
                row["checkpoint_ns"],
                row["checkpoint_id"],
                row["task_id"],
                row["idx"],
            )
            if new is None:
                await conn.execute(DELETE_WRITE, key)
            else:
                await conn.execute(UPDATE_WRITE, (*new, *key))

    async def _checkpoints(self, conn: Any, thread_ids: list[str]) -> None:
        rows = await (await conn.execute(SELECT_CHECKPOINTS, (thread_ids,))).fetchall()
        for row in rows:
            text = json.dumps([row["checkpoint"], row["metadata"]], ensure_ascii=False)
            if not self.needles.found_in(text):
                continue
            checkpoint = redact_value(row["checkpoint"], self.needles)
            metadata = redact_value(row["metadata"], self.needles)
            key = (row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])
            await conn.execute(UPDATE_CHECKPOINT, (Jsonb(checkpoint), Jsonb(metadata), *key))
            self.rewritten += 1


async def owner_threads(conn: Any, owner: int, everywhere: bool = False) -> list[str]:
    """Return the ids of the owner's conversations' checkpoint threads (`everywhere`: and
    of any other thread a turn of theirs wrote); none without checkpoint tables."""
    row = await (await conn.execute(HAS_CHECKPOINTS)).fetchone()
    if row is None or not row["present"]:
        return []
    query = OWNER_THREADS if everywhere else CONVERSATION_THREADS
    cur = await conn.execute(query, {"owner": owner})
    return [r["thread_id"] for r in await cur.fetchall()]


async def redact_owner(conn: Any, owner: int, needles: Needles) -> int:
    """Redact the needles from every checkpoint of the owner, in `conn`'s transaction;
    return how many stored values changed."""
    if not needles:
        return 0
    redactor = Redactor(needles)
    await redactor.threads(conn, await owner_threads(conn, owner))
    if redactor.rewritten or redactor.dropped:
        logger.info(
            "checkpoints of %s redacted: %d values rewritten, %d dropped",
            owner,
            redactor.rewritten,
            redactor.dropped,
        )
    return redactor.rewritten + redactor.dropped
