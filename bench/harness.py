"""What every turn-bench phase needs: a fresh schema, counters of database work, sizes."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import re
import statistics
import tempfile
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg._cursor_base import BaseCursor
from psycopg.pq import TransactionStatus
from psycopg.waiting import WAIT_R
from psycopg_pool import AsyncConnectionPool

from src.config import load_settings
from src.storage.checkpointer import PooledPostgresSaver
from src.storage.pg_client import describe_dsn, make_pool

CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
TABLE_STATS = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables
WHERE schemaname = %s
"""


@contextlib.contextmanager
def server(dsn: str | None = None) -> Iterator[tuple[str, str]]:
    """Yield (dsn, label): `dsn`, else DATABASE_URL / PG_HOST, else a temporary embedded server."""
    dsn = dsn or load_settings().server_dsn()
    if dsn is not None:
        yield dsn, describe_dsn(dsn)
        return
    import pgserver

    # Short path: the server's unix socket lives in its data directory.
    with tempfile.TemporaryDirectory(prefix="tgab-", dir="/tmp") as tmp:
        embedded = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="stop")
        try:
            yield str(embedded.get_uri()), "embedded pgserver (temporary)"
        finally:
            embedded.cleanup()


@contextlib.asynccontextmanager
async def fresh_schema(base_dsn: str, prefix: str = "bench") -> AsyncIterator[tuple[str, str]]:
    """Create an empty schema, yield (dsn with search_path, schema), drop it afterwards."""
    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as admin:
        await admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield psycopg.conninfo.make_conninfo(base_dsn, options=f"-c search_path={schema}"), schema
    finally:
        async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as admin:
            await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def open_bench_pool(dsn: str, min_size: int, max_size: int) -> AsyncConnectionPool[Any]:
    """Open a pool shaped exactly like the application's (`make_pool`)."""
    pool = make_pool(dsn, min_size, max_size)
    await pool.open()
    await pool.wait(timeout=30)
    return pool


# --- database work per turn -------------------------------------------------------

IDLE = TransactionStatus.IDLE
_IN_SAVER: contextvars.ContextVar[bool] = contextvars.ContextVar("in_saver", default=False)


_WRITE = re.compile(r"\b(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
# A statement that turns synchronous_commit off for the rest of its transaction:
# set_config('synchronous_commit', 'off', true) inside a write, or SET LOCAL.
_ASYNC_COMMIT = re.compile(
    r"'synchronous_commit',\s*'off'|SET\s+LOCAL\s+synchronous_commit\s*(=|TO)\s*'?off",
    re.IGNORECASE,
)


def _sql_text(query: Any) -> str:
    if isinstance(query, bytes):
        return query.decode(errors="replace")
    if isinstance(query, str):
        return query
    return str(getattr(query, "_obj", query))  # psycopg.sql.Composable


def _reads(gen: Any, on_read: Any) -> Any:
    """Pass a psycopg generator through, calling `on_read` once if it waits for the server.

    One generator is one exchange (a query and its results, a pipeline's sync): however
    many reads its answer takes (a large result comes in several), it is one round trip.
    """
    try:
        state = next(gen)
    except StopIteration as stop:
        return stop.value
    waited = False
    while True:
        # Only a read-only wait blocks on the server; RW polls and goes on (pipeline flushes).
        if state == WAIT_R and not waited:
            waited = True
            on_read()
        ready = yield state
        try:
            state = gen.send(ready)
        except StopIteration as stop:
            return stop.value


class DbCounter:
    """Count round trips, statements and pool checkouts while installed.

    A round trip is an exchange that waits for the server's answer (a query, BEGIN/COMMIT,
    a pipeline's sync; one however many reads the answer takes), plus the extra exchange
    psycopg makes to prepare a statement outside pipeline mode; statements are
    `execute`/`executemany` calls; a commit is a connection going back to idle after a
    write, and waits for its WAL flush
    unless the transaction's writes all set synchronous_commit off (`async_commits`);
    `prepares` counts the round trips that prepared a statement. Work inside the
    LangGraph saver is also counted apart (`saver_*`), so our own queries and the
    checkpointer's can be told apart.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._saved: list[tuple[Any, str, Any]] = []
        self._dirty: dict[int, bool] = {}

    def _patch(self, owner: Any, name: str, make: Any) -> None:
        original = getattr(owner, name)
        self._saved.append((owner, name, original))
        setattr(owner, name, make(original))

    def _count(self, key: str) -> None:
        self.counts[key] += 1
        if _IN_SAVER.get():
            self.counts["saver_" + key] += 1

    def install(self) -> None:
        count = self._count

        def counting(key: str) -> Any:
            def make(original: Any) -> Any:
                @functools.wraps(original)
                async def wrapper(*args: Any, **kwargs: Any) -> Any:
                    count(key)
                    return await original(*args, **kwargs)

                return wrapper

            return make

        dirty = self._dirty
        # Connections whose open transaction turned synchronous_commit off.
        relaxed: set[int] = set()

        def waiting(original: Any) -> Any:
            @functools.wraps(original)
            async def wait(conn: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    return await original(
                        conn, _reads(gen, lambda: count("round_trips")), *args, **kwargs
                    )
                finally:
                    # Back to idle after writes: a transaction committed (and waited for
                    # its WAL flush, with synchronous_commit on).
                    key = id(conn)
                    if conn.pgconn.transaction_status == IDLE:
                        if key in dirty:
                            flushed = dirty.pop(key) and key not in relaxed
                            count("commits" if flushed else "async_commits")
                        relaxed.discard(key)

            return wait

        def statement(original: Any) -> Any:
            @functools.wraps(original)
            async def execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
                count("statements")
                text = _sql_text(query)
                key = id(cursor.connection)
                if text.lstrip().upper().startswith("SET LOCAL") and _ASYNC_COMMIT.search(text):
                    relaxed.add(key)  # the whole transaction commits without the flush
                elif _WRITE.search(text):
                    # A write asking for synchronous_commit off does not wait for the flush,
                    # unless an earlier write of the same transaction does.
                    dirty[key] = dirty.get(key, False) or not _ASYNC_COMMIT.search(text)
                return await original(cursor, query, *args, **kwargs)

            return execute

        def preparing(original: Any) -> Any:
            @functools.wraps(original)
            def send_prepare(cursor: Any, *args: Any, **kwargs: Any) -> Any:
                if not cursor._conn._pipeline:
                    count("round_trips")  # psycopg waits for the PREPARE first
                    count("prepares")  # once per statement and connection
                return original(cursor, *args, **kwargs)

            return send_prepare

        def saver_call(original: Any) -> Any:
            @functools.wraps(original)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                self.counts["saver_calls"] += 1
                token = _IN_SAVER.set(True)
                try:
                    return await original(*args, **kwargs)
                finally:
                    _IN_SAVER.reset(token)

            return wrapper

        self._patch(psycopg.AsyncConnection, "wait", waiting)
        self._patch(BaseCursor, "_send_prepare", preparing)
        self._patch(psycopg.AsyncCursor, "execute", statement)
        self._patch(psycopg.AsyncCursor, "executemany", statement)
        self._patch(AsyncConnectionPool, "getconn", counting("checkouts"))
        for name in ("aget_tuple", "aput", "aput_writes"):
            self._patch(AsyncPostgresSaver, name, saver_call)
        # Our saver writes a turn's deferred checkpoints here.
        self._patch(PooledPostgresSaver, "_write", saver_call)

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()

    @contextlib.contextmanager
    def installed(self) -> Iterator[DbCounter]:
        self.install()
        try:
            yield self
        finally:
            self.uninstall()


async def table_stats(base_dsn: str, schema: str) -> dict[str, dict[str, int]]:
    """Return inserted/updated/deleted row counts per table of `schema`."""
    async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as conn:
        cur = await conn.execute(TABLE_STATS, (schema,))
        return {
            r[0]: {"ins": int(r[1]), "upd": int(r[2]), "del": int(r[3])}
            for r in await cur.fetchall()
        }


async def settled_stats(
    base_dsn: str, schema: str, expect: tuple[str, int] | None = None, patience: float = 15.0
) -> dict[str, dict[str, int]]:
    """Return table stats once the server has them all.

    Backends report their counts when they exit (or now and then while idle), so close
    the pool first; then poll until `expect` (table, minimum inserts) is reached and two
    reads agree.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    previous: dict[str, dict[str, int]] | None = None
    while True:
        stats = await table_stats(base_dsn, schema)
        reached = expect is None or stats.get(expect[0], {}).get("ins", 0) >= expect[1]
        if (reached and stats == previous) or loop.time() > deadline:
            return stats
        previous = stats if reached else None
        await asyncio.sleep(0.25)


def stats_delta(
    after: dict[str, dict[str, int]], before: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """Return per-table row counts written between two `table_stats` reads."""
    out: dict[str, dict[str, int]] = {}
    for table, values in after.items():
        base = before.get(table, {})
        delta = {k: v - base.get(k, 0) for k, v in values.items()}
        if any(delta.values()):
            out[table] = delta
    return out


async def checkpoint_bytes(pool: AsyncConnectionPool[Any]) -> dict[str, int]:
    """Return the stored size of the checkpoint tables: rows (as stored) and on disk."""
    parts = [
        f"(SELECT COALESCE(sum(pg_column_size(t.*)), 0) FROM {t} t)" for t in CHECKPOINT_TABLES
    ]
    disk = [f"pg_total_relation_size('{t}')" for t in CHECKPOINT_TABLES]
    sql = f"SELECT ({' + '.join(parts)})::bigint AS rows, ({' + '.join(disk)})::bigint AS disk"
    async with pool.connection() as conn:
        row = await (await conn.execute(sql)).fetchone()
    assert row is not None
    return {"rows": int(row["rows"]), "disk": int(row["disk"])}


# --- numbers --------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Return the q-quantile (0..1) by linear interpolation."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    """Return median, p95, p99 and mean of a sample, rounded for reading."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "median": round(statistics.median(values), 3),
        "p95": round(percentile(values, 0.95), 3),
        "p99": round(percentile(values, 0.99), 3),
        "mean": round(statistics.fmean(values), 3),
    }
