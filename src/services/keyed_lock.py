"""An asyncio lock per key, forgotten when nobody holds or waits for it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class KeyedLock:
    """Serialize work per key (a chat, a memory owner); different keys run concurrently.

    asyncio locks are granted in request order, so callers that take the lock before
    their first await keep their arrival order.
    """

    def __init__(self) -> None:
        self._locks: dict[int, asyncio.Lock] = {}
        self._holders: dict[int, int] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: int) -> AsyncIterator[None]:
        """Hold the key's lock for the duration of the block."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._holders[key] = self._holders.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            # Forget idle keys so the table does not grow with every user ever seen.
            self._holders[key] -= 1
            if not self._holders[key]:
                del self._holders[key], self._locks[key]

    def waiting(self, key: int) -> int:
        """Return how many callers wait for the key's lock (its holder not counted)."""
        count = self._holders.get(key, 0)
        lock = self._locks.get(key)
        return count - 1 if lock is not None and lock.locked() else count

    def __len__(self) -> int:
        """Return how many keys have work running or waiting."""
        return len(self._locks)
