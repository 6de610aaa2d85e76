"""One async connection pool over a configured server or the embedded PostgreSQL."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from src.config import Settings

logger = logging.getLogger(__name__)

# The embedded server's unix socket lives in its data directory, and socket paths are
# limited to about 107 bytes, so the data directory path must stay short.
_MAX_EMBEDDED_DIR = 80


class DatabaseUnavailable(RuntimeError):
    """The database cannot be reached; the message names where we tried."""


def describe_dsn(dsn: str) -> str:
    """Return `host:port/dbname` of a DSN, never its password."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<malformed DSN>"
    host = info.get("host") or "localhost"
    return f"{host}:{info.get('port') or 5432}/{info.get('dbname') or ''}"


def reason_of(exc: BaseException, dsn: str = "") -> str:
    """Return the first line of an error, without the DSN's password."""
    text = str(exc).strip()
    reason = text.splitlines()[0] if text else type(exc).__name__
    try:
        password = psycopg.conninfo.conninfo_to_dict(dsn).get("password") if dsn else None
    except psycopg.ProgrammingError:
        password = None
    if password:
        reason = reason.replace(str(password), "***")
    return reason


def start_embedded(data_dir: Path) -> str:
    """Start (or reuse) the embedded server in `data_dir` and return its DSN."""
    # pgserver asks platformdirs for a runtime directory at import time, which warns on
    # every machine without XDG_RUNTIME_DIR (containers, cron, ssh): noise, not a problem.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
    import pgserver  # imported lazily: only needed without a configured server

    pgdata = data_dir / "pg"
    if len(str(pgdata)) > _MAX_EMBEDDED_DIR:
        raise DatabaseUnavailable(
            f"TGAGENT_DATA_DIR {data_dir} is too long for PostgreSQL's socket path; "
            "choose a shorter directory"
        )
    pgdata.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None keeps the server and its data across runs and processes.
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    uri = server.get_uri()
    logger.info("using embedded PostgreSQL in %s", pgdata)
    return str(uri)


def resolve_dsn(settings: Settings) -> str:
    """Return the DSN to use: the configured server, else the embedded one."""
    dsn = settings.server_dsn()
    if dsn is not None:
        return dsn
    return start_embedded(settings.tgagent_data_dir)


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute("SET TIME ZONE 'UTC'")


async def check_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """Refuse a pooled connection the server has closed, without a round trip.

    A server that restarts, or terminates the backend, says so and closes its end of
    the socket; reading what already arrived (libpq never waits for more) finds that
    out, and the pool replaces the connection. A query per checkout would find the same
    at the price of a round trip each time, the turn's largest fixed cost.
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    pgconn = conn.pgconn
    # The first read may only take the server's goodbye, the second then finds the end
    # of the stream; each raises OperationalError once the server has hung up.
    pgconn.consume_input()
    pgconn.consume_input()
    if pgconn.status != psycopg.pq.ConnStatus.OK:
        raise psycopg.OperationalError("the connection is broken")


# Set in the tasks of work that may wait (memory work after a reply, session ends,
# embeddings): see `Pool`.
BACKGROUND: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "tgagent_background", default=False
)
# Set while the current task holds a background share: a nested checkout is not gated
# again (a task waiting for a second share while holding one could wait forever).
_SHARED: contextvars.ContextVar[bool] = contextvars.ContextVar("tgagent_shared", default=False)


def background_context() -> contextvars.Context:
    """Return a copy of the current context marked as background, for `create_task`."""
    context = contextvars.copy_context()
    context.run(BACKGROUND.set, True)
    return context


class Pool(AsyncConnectionPool[Any]):
    """The shared pool, where background work takes at most a share of the connections.

    After a reply, every user's memory work goes on in the background; under load (200
    users typing at once) hundreds of such tasks wait for a connection, and the pool
    serves them first come, first served: a turn's job then waited behind all of them,
    and one gave up after the pool's 30 s (a message lost under CI's load test). Here a
    background checkout first waits for one of `background_share` places, outside the
    pool, so the pool's queue never holds more than that many background waiters.
    """

    def __init__(self, *args: Any, background_share: int = 4, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.background_share = background_share
        self._gate = asyncio.Semaphore(background_share)

    @asynccontextmanager
    async def connection(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 (the signature it overrides)
    ) -> AsyncIterator[Any]:
        if not BACKGROUND.get() or _SHARED.get():
            async with super().connection(timeout) as conn:
                yield conn
            return
        async with self._gate:
            token = _SHARED.set(True)
            try:
                async with super().connection(timeout) as conn:
                    yield conn
            finally:
                _SHARED.reset(token)


def make_pool(dsn: str, min_size: int = 1, max_size: int = 10) -> Pool:
    """Create a closed pool shaped for both our repositories and LangGraph's saver.

    Background work gets at most half of the connections (see `Pool`).
    """
    return Pool(
        dsn,
        background_share=max(1, max_size // 2),
        min_size=min_size,
        max_size=max_size,
        open=False,
        check=check_connection,
        configure=_configure,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        name="tgagent",
        reconnect_timeout=60,
    )


async def open_pool(
    dsn: str, min_size: int = 1, max_size: int = 10, connect_timeout: float = 10.0
) -> AsyncConnectionPool[Any]:
    """Open a pool and wait for its first connection, failing fast with a clear error."""
    where = describe_dsn(dsn)
    # Probe once first: the pool itself would retry quietly until the timeout.
    try:
        conn = await asyncio.wait_for(
            psycopg.AsyncConnection.connect(dsn, connect_timeout=max(1, int(connect_timeout))),
            connect_timeout,
        )
        await conn.close()
    except (OSError, psycopg.Error, TimeoutError) as exc:
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL at {where}: {reason_of(exc, dsn)}"
        ) from None
    pool = make_pool(dsn, min_size, max_size)
    await pool.open()
    try:
        await pool.wait(timeout=connect_timeout)
    except PoolTimeout:
        await pool.close()
        raise DatabaseUnavailable(f"PostgreSQL at {where} did not accept connections") from None
    logger.info("database pool open: %s (min %d, max %d)", where, min_size, max_size)
    return pool


async def open_pool_from_settings(settings: Settings) -> AsyncConnectionPool[Any]:
    """Resolve the database from settings and open the shared pool."""
    dsn = await asyncio.to_thread(resolve_dsn, settings)
    return await open_pool(
        dsn, settings.pg_pool_min, settings.pg_pool_max, settings.pg_connect_timeout
    )
