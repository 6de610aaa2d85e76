"""Run one turn at a time per memory owner: an asyncio lock in-process, a lease in Postgres."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

from psycopg_pool import AsyncConnectionPool

from src.services.keyed_lock import KeyedLock

logger = logging.getLogger(__name__)

# Leases commit without waiting for their WAL flush (synchronous_commit off for this
# statement's transaction only): the turn's next write, the user's message, is a normal
# commit and flushes the lease with it, so a turn waits for one flush instead of two.
ACQUIRE = """
INSERT INTO turn_leases (owner_id, holder, expires_at)
SELECT %s, %s, now() + make_interval(secs => %s)
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
ON CONFLICT (owner_id) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE turn_leases.expires_at < now() OR turn_leases.holder = EXCLUDED.holder
RETURNING holder
"""
RENEW = """
UPDATE turn_leases SET expires_at = now() + make_interval(secs => %s)
WHERE owner_id = %s AND holder = %s
"""
HOLDER = "SELECT holder FROM turn_leases WHERE owner_id = %s"
TAKE_OVER = """
UPDATE turn_leases SET holder = %s, expires_at = now() + make_interval(secs => %s)
WHERE owner_id = %s AND holder = %s
RETURNING holder
"""
RELEASE = """
DELETE FROM turn_leases USING (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
WHERE owner_id = %s AND holder = %s
"""


def _process_gone(holder: str) -> bool:
    """Tell whether a lease holder was a process on this host that no longer runs.

    A process killed mid-turn (SIGKILL, OOM) leaves its lease behind; its successor on the
    same host need not wait for the lease to expire. Holders elsewhere, and pids that are
    alive (or reused), are left to expire.
    """
    parts = holder.rsplit(":", 2)  # host:pid:instance, as TurnLocks names them
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    if os.name != "posix":  # signal 0 probes a process only on POSIX
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


class TurnLocks:
    """Serialize turns per owner id within this process and across processes."""

    def __init__(self, pool: AsyncConnectionPool[Any], lease_seconds: float = 120.0) -> None:
        self.pool = pool
        self.lease_seconds = lease_seconds
        # One holder name per process: the asyncio lock already serializes this process's
        # turns, so a lease this process failed to release (database restart) is simply
        # taken over by its next turn instead of blocking the owner until it expires.
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._local = KeyedLock()

    async def _acquire_lease(self, owner_id: int, holder: str) -> None:
        delay = 0.01
        while True:
            async with self.pool.connection() as conn:
                cur = await conn.execute(ACQUIRE, (owner_id, holder, self.lease_seconds))
                if await cur.fetchone() is not None:
                    return
                if await self._take_over_from_the_dead(conn, owner_id, holder):
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)

    async def _take_over_from_the_dead(self, conn: Any, owner_id: int, holder: str) -> bool:
        """Take the owner's lease from a process on this host that died holding it."""
        row = await (await conn.execute(HOLDER, (owner_id,))).fetchone()
        old = row["holder"] if row else None
        if old is None or not _process_gone(old):
            return False
        cur = await conn.execute(TAKE_OVER, (holder, self.lease_seconds, owner_id, old))
        if await cur.fetchone() is None:
            return False  # someone else was quicker
        logger.info("turn lease of %s taken over from %s, which is gone", owner_id, old)
        return True

    async def _renew_forever(self, owner_id: int, holder: str) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                async with self.pool.connection() as conn:
                    await conn.execute(RENEW, (self.lease_seconds, owner_id, holder))
            except Exception:
                logger.warning("could not renew the turn lease of %s", owner_id, exc_info=True)

    @contextlib.asynccontextmanager
    async def hold(self, owner_id: int) -> AsyncIterator[None]:
        """Hold the owner's turn lock for the duration of the block."""
        async with self._local.hold(owner_id):
            holder = self.holder
            await self._acquire_lease(owner_id, holder)
            renew = asyncio.create_task(self._renew_forever(owner_id, holder))
            try:
                yield
            finally:
                renew.cancel()
                try:
                    async with self.pool.connection() as conn:
                        await conn.execute(RELEASE, (owner_id, holder))
                except Exception:
                    # The lease expires by itself; nothing is lost by not deleting it now.
                    logger.warning(
                        "could not release the turn lease of %s", owner_id, exc_info=True
                    )
