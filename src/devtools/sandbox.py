"""A stand-in for the connection pool whose every write is rolled back at the end.

`replay` runs the current graph with repositories built over a `SandboxPool`: every
`pool.connection()` hands out the same real connection, inside one transaction that is
never committed. The nodes' SQL really runs (reads see the replay's own writes), and
nothing of it survives. Each borrow is a savepoint, so a failed statement is undone alone,
as it would be on a fresh autocommit connection from the real pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection


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
