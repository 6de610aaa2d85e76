"""KeyedLock: one holder per key, arrival order, and who waits."""

from __future__ import annotations

import asyncio

from src.services.keyed_lock import KeyedLock


async def test_waiting_counts_the_callers_behind_the_holder() -> None:
    locks = KeyedLock()
    order: list[str] = []
    release = asyncio.Event()

    async def take(name: str) -> None:
        async with locks.hold(1):
            order.append(name)
            await release.wait()

    assert locks.waiting(1) == 0
    first = asyncio.create_task(take("a"))
    await asyncio.sleep(0)
    assert locks.waiting(1) == 0 and order == ["a"]
    rest = [asyncio.create_task(take(n)) for n in "bc"]
    await asyncio.sleep(0)
    assert locks.waiting(1) == 2 and locks.waiting(2) == 0
    release.set()
    await asyncio.gather(first, *rest)
    assert order == ["a", "b", "c"] and locks.waiting(1) == 0 and len(locks) == 0
