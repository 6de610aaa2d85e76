"""Where `replay` runs: a copy of one owner's rows, and a pool stand-in that rolls back.

`replay` opens a connection of its own and copies the owner's rows of every users' table
into temporary tables of the same names (`copy_owner`). PostgreSQL searches a session's
temporary tables before any schema, so the graph's unqualified SQL on that connection
reads and writes the copies, and the users' tables are only read, once, in a short
transaction: a live turn never waits for a replay. The copies die with the connection.

The graph's repositories are built over a `SandboxPool`: every `pool.connection()` hands
out that same connection, inside one transaction that is never committed. The nodes' SQL
really runs (reads see the replay's own writes), and nothing of it survives. Each borrow
is a savepoint, so a failed statement is undone alone, as it would be on a fresh
autocommit connection from the real pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

# Every table the graph reads or writes (the users' tables), in copy order, with which of
# its rows belong to the owner. Conversations are copied before what refers to them.
OWNER_ROWS: tuple[tuple[str, str], ...] = (
    ("users", "telegram_user_id = %(owner)s"),
    ("conversations", "telegram_user_id = %(owner)s"),
    ("messages", "conversation_id IN (SELECT id FROM pg_temp.conversations)"),
    ("message_embeddings", "owner_id = %(owner)s"),
    ("facts", "telegram_user_id = %(owner)s"),
    ("session_compacts", "telegram_user_id = %(owner)s"),
    ("pending_facts", "telegram_user_id = %(owner)s"),
    ("squash_log", "conversation_id IN (SELECT id FROM pg_temp.conversations)"),
    # The MCP calls the owner's turns made: a replay gives their recorded results.
    ("mcp_calls", "owner_id = %(owner)s"),
    # A turn answering a Telegram update stores its reply for sending: a replay never
    # does (it passes no delivery), and if it did, the reply would land in an empty copy.
    ("inbox", "false"),
    ("inbox_erased", "false"),
    ("outbox", "false"),
    # A replay's models are made without the usage recorder: its calls cost the operator,
    # not the user, and if one were recorded it would land in an empty copy.
    ("llm_calls", "false"),
    # Budget warnings are sent by the bot after a reply, never by a replay.
    ("budget_warnings", "false"),
    # The embedding worker runs beside the bot, not in the graph a replay runs.
    ("embedding_state", "false"),
    ("embedding_failures", "false"),
    # schedule_task writes the owner's tasks; the job it defers for the first slot goes
    # into the real queue's table, but in the replay's transaction: never committed.
    ("scheduled_tasks", "owner_id = %(owner)s"),
    # Slots are claimed by the bot's job queue, never by a replay.
    ("task_runs", "false"),
)
SCHEMA_OF = """
SELECT n.nspname AS schema FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = %s::regclass
"""
# Indexes, defaults (ids still come from the real sequences, so they stay unique),
# constraints other than foreign keys. Triggers are not copied by LIKE: see COPY_TRIGGERS.
CREATE_COPY = "CREATE TEMP TABLE {copy} (LIKE {real} INCLUDING ALL)"
COPY_ROWS = "INSERT INTO {copy} SELECT * FROM {real} WHERE {rows}"
# The copies' triggers, created after the rows are in (those already carry what they set).
COPY_TRIGGERS = (
    "CREATE TRIGGER messages_search_fill BEFORE INSERT ON pg_temp.messages"
    " FOR EACH ROW EXECUTE FUNCTION messages_search_fill()",
)


async def connect_like(pool: AsyncConnectionPool[Any]) -> AsyncConnection[Any]:
    """Open a connection of its own, made and configured as the pool makes its own.

    Not one of the pool's: a pooled connection may hold prepared statements planned on the
    real tables, and its temporary tables would outlive the replay. This one prepares
    nothing, so every statement is planned against the copies.
    """
    conninfo, kwargs = pool.conninfo, pool.kwargs or {}
    if not isinstance(conninfo, str) or not isinstance(kwargs, dict):
        raise TypeError("the pool's conninfo and kwargs must be given as values, not callables")
    conn = await AsyncConnection.connect(conninfo, **kwargs)
    conn.prepare_threshold = None
    configure = pool._configure  # the pool's own hook (time zone), not public in psycopg_pool
    if configure is not None:
        await configure(conn)
    return conn


async def copy_owner(conn: AsyncConnection[Any], owner_id: int) -> dict[str, int]:
    """Shadow the users' tables on `conn` with copies of the owner's rows; return counts."""
    copied: dict[str, int] = {}
    async with conn.transaction():
        for table, rows in OWNER_ROWS:
            cur = await conn.execute(SCHEMA_OF, (table,))
            found = await cur.fetchone()
            assert found is not None  # ::regclass raised already for a missing table
            real = sql.Identifier(found["schema"], table)
            copy = sql.Identifier("pg_temp", table)
            await conn.execute(sql.SQL(CREATE_COPY).format(copy=copy, real=real))
            query = sql.SQL(COPY_ROWS).format(copy=copy, real=real, rows=sql.SQL(rows))
            cur = await conn.execute(query, {"owner": owner_id})
            copied[table] = cur.rowcount
        for trigger in COPY_TRIGGERS:
            await conn.execute(trigger)
    return copied


class SandboxPool:
    """Lend one connection, inside a caller's rolled-back transaction, to one task at a time."""

    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self.conn = conn
        self._lock = asyncio.Lock()
        self._owner: asyncio.Task[Any] | None = None
        self.borrows = 0

    @asynccontextmanager
    async def connection(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 - AsyncConnectionPool.connection's
    ) -> AsyncIterator[AsyncConnection[Any]]:
        """Lend the connection; a task that already holds it may borrow it again."""
        task = asyncio.current_task()
        if task is not None and self._owner is task:
            async with self.conn.transaction():
                yield self.conn
            return
        async with self._lock:
            self._owner = task
            self.borrows += 1
            try:
                async with self.conn.transaction():
                    yield self.conn
            finally:
                self._owner = None
