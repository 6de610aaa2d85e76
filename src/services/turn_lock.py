"""Run one turn at a time per memory owner: an asyncio lock in-process, a lease in Postgres.

The memory work after a reply (summary, facts) runs under the same lock but gives way:
when the owner's next turn, `/new`, `/forget` or `/compress` arrives in this process, the
turn that waits for that work is cancelled after GIVE_WAY_AFTER seconds (see
`TurnLocks.give_way`). The work itself is shielded (src/graph/memory/folds.py): it goes on
and commits, guarded, so nothing is lost and nothing is asked of the model twice. A turn
of another process that finds the lease held marks it wanted (`turn_leases.wanted`); the
turn that gave way polls that mark and then gives way the same, so that turn waits about
as long plus a poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from psycopg_pool import AsyncConnectionPool

from src.services.keyed_lock import KeyedLock

logger = logging.getLogger(__name__)

T = TypeVar("T")
Along = Callable[[Any], Awaitable[Callable[[], Awaitable[T]]]]
"""Statements sent with the lease's (see `TurnLocks.hold`): given the lease's connection,
in pipeline mode, send them and return what reads their results."""

# Seconds the turn that waits for its memory work (shielded: it goes on anyway) may hold the
# owner's lock once the next turn waits: its checkpoints of that work if it is about to end,
# nothing more (a second here held a quarter of the replies of a user who types fast by a
# second each, in `python -m bench memory`).
GIVE_WAY_AFTER = 0.1
# How often work that gave way looks whether a turn of another process wants the lease.
WANTED_POLL = 0.25

# Leases commit without waiting for their WAL flush (synchronous_commit off for this
# statement's transaction only): the turn's next write, the user's message, is a normal
# commit and flushes the lease with it, so a turn waits for one flush instead of two.
ACQUIRE = """
INSERT INTO turn_leases (owner_id, holder, expires_at)
SELECT %s, %s, now() + make_interval(secs => %s)
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
ON CONFLICT (owner_id) DO UPDATE
SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at, wanted = false
WHERE turn_leases.expires_at < now() OR turn_leases.holder = EXCLUDED.holder
RETURNING holder
"""
RENEW = """
UPDATE turn_leases SET expires_at = now() + make_interval(secs => %s)
WHERE owner_id = %s AND holder = %s
"""
HOLDER = "SELECT holder FROM turn_leases WHERE owner_id = %s"
TAKE_OVER = """
UPDATE turn_leases SET holder = %s, expires_at = now() + make_interval(secs => %s), wanted = false
WHERE owner_id = %s AND holder = %s
RETURNING holder
"""
# A turn of another process waits for the lease: ask its holder to give way.
WANT = "UPDATE turn_leases SET wanted = true WHERE owner_id = %s AND holder <> %s AND NOT wanted"
WANTED = "SELECT wanted FROM turn_leases WHERE owner_id = %s AND holder = %s"
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

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        lease_seconds: float = 120.0,
        give_way_after: float = GIVE_WAY_AFTER,
    ) -> None:
        self.pool = pool
        self.lease_seconds = lease_seconds
        self.give_way_after = give_way_after
        # One holder name per process: the asyncio lock already serializes this process's
        # turns, so a lease this process failed to release (database restart) is simply
        # taken over by its next turn instead of blocking the owner until it expires.
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._local = KeyedLock()
        # Per owner, the holder task whose remaining work may be cancelled (give_way),
        # and the timer that cancels it once someone waits.
        self._yielding: dict[int, asyncio.Task[Any]] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._watchers: dict[int, asyncio.Task[None]] = {}

    async def _acquire_lease(
        self, owner_id: int, holder: str, along: Along[T] | None = None
    ) -> T | None:
        """Take the owner's lease, waiting for its holder if another has it; return what
        `along` read (see `hold`)."""
        delay, asked = 0.01, False
        while True:
            async with self.pool.connection() as conn:
                read = None
                async with conn.pipeline() if along is not None else contextlib.nullcontext():
                    cur = await conn.execute(ACQUIRE, (owner_id, holder, self.lease_seconds))
                    if along is not None:
                        read = await along(conn)
                if await cur.fetchone() is not None:
                    return await read() if read is not None else None
                if await self._take_over_from_the_dead(conn, owner_id, holder):
                    # Read again: what was read beside the lease came before it was ours.
                    return await (await along(conn))() if along is not None else None
                if not asked:
                    await conn.execute(WANT, (owner_id, holder))
                    asked = True
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

    def give_way(self, owner_id: int) -> None:
        """Let the owner's next holder cancel the rest of the current task's work.

        For the memory work after a reply, which loses nothing when cancelled. Once a
        holder waits (already, or later), the work has `give_way_after` seconds left.
        """
        task = asyncio.current_task()
        if task is None:
            return
        self._yielding[owner_id] = task
        if self._local.waiting(owner_id):
            self._interrupt_soon(owner_id)
        else:
            self._watchers[owner_id] = asyncio.create_task(self._watch_lease(owner_id))

    async def _watch_lease(self, owner_id: int) -> None:
        """Give way once a turn of another process asks for the lease (WANT)."""
        while True:
            # Most memory work is over before the first look: it costs no query then.
            await asyncio.sleep(WANTED_POLL)
            if owner_id not in self._yielding or owner_id in self._timers:
                return
            try:
                async with self.pool.connection() as conn:
                    cur = await conn.execute(WANTED, (owner_id, self.holder))
                    row = await cur.fetchone()
            except Exception:
                logger.warning("could not read the turn lease of %s", owner_id, exc_info=True)
                row = None
            if row is not None and row["wanted"]:
                self._interrupt_soon(owner_id)
                return

    def _interrupt_soon(self, owner_id: int) -> None:
        """Cancel the owner's holder, if it gave way, unless it ends within the grace."""
        if owner_id in self._yielding and owner_id not in self._timers:
            loop = asyncio.get_running_loop()
            self._timers[owner_id] = loop.call_later(self.give_way_after, self._interrupt, owner_id)

    def _interrupt(self, owner_id: int) -> None:
        self._timers.pop(owner_id, None)
        self._stop_watching(owner_id)
        task = self._yielding.pop(owner_id, None)
        if task is not None and not task.done():
            logger.info("memory work of %s after its reply cancelled for its next turn", owner_id)
            task.cancel()

    def _stop_yielding(self, owner_id: int) -> None:
        """Forget the current task's give_way: its work is over (or was cancelled)."""
        if self._yielding.get(owner_id) is asyncio.current_task():
            del self._yielding[owner_id]
            timer = self._timers.pop(owner_id, None)
            if timer is not None:
                timer.cancel()
            self._stop_watching(owner_id)

    def _stop_watching(self, owner_id: int) -> None:
        watcher = self._watchers.pop(owner_id, None)
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()

    @contextlib.asynccontextmanager
    async def hold(self, owner_id: int, along: Along[T] | None = None) -> AsyncIterator[T | None]:
        """Hold the owner's turn lock for the duration of the block.

        A holder that gave way (`give_way`) is waited for `give_way_after` seconds at
        most, then cancelled. With `along`, the block gets what it read: its statements
        go in the lease's round trip (and its transaction), and are sent again while
        the lease is not ours, so what the block gets was read with the lease held.
        """
        # Before the first await: callers keep their arrival order.
        self._interrupt_soon(owner_id)
        async with self._local.hold(owner_id):
            holder = self.holder
            got = await self._acquire_lease(owner_id, holder, along)
            renew = asyncio.create_task(self._renew_forever(owner_id, holder))
            try:
                yield got
            finally:
                # Before any await: a cancel meant for the work must not cut the release.
                self._stop_yielding(owner_id)
                renew.cancel()
                try:
                    async with self.pool.connection() as conn:
                        await conn.execute(RELEASE, (owner_id, holder))
                except Exception:
                    # The lease expires by itself; nothing is lost by not deleting it now.
                    logger.warning(
                        "could not release the turn lease of %s", owner_id, exc_info=True
                    )
