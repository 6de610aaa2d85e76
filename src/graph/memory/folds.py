"""Memory work that outlives the turn that started it: one run per conversation, and back-off.

A summary fold is not the turn's to cancel: the owner's next turn gives the memory work
after a reply only a short grace (see TurnLocks.give_way), and a memory model slower than
the user would then be called every turn and cancelled every turn, each call already sent
and billed. So a fold runs as a task of its own, at most one per conversation in this
process; the turn that started it waits for it shielded, and when that turn gives way the
fold goes on and commits (its write is guarded, see ConversationRepository.fold_summary).
The next fold takes everything due by then: a slower model gets a larger batch.

After a transient failure (5xx, timeout) a conversation's memory work waits before it is
tried again, doubling from MEMORY_RETRY_SECONDS up to 64 times that. An outage of the
endpoint (it was down, not the input) ends as soon as the endpoint answers again: the
chat model's reply on the same base URL, or a memory call (`Backoff.endpoint_up`), so the
backlog folds within a turn or two instead of minutes later.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from src.graph.memory.idle import mark_work
from src.storage.pg_client import background_context

MAX_DOUBLINGS = 6


@dataclass
class Backoff:
    """When each key's memory work may be tried again after transient failures."""

    base: float = 5.0
    clock: Callable[[], float] = time.monotonic
    _failures: dict[Hashable, tuple[int, float, str | None]] = field(default_factory=dict)

    def waiting(self, key: Hashable) -> bool:
        """Tell whether `key`'s work should not be tried yet."""
        entry = self._failures.get(key)
        return entry is not None and self.clock() < entry[1]

    def failed(self, key: Hashable, endpoint: str | None = None) -> float:
        """Record a transient failure; return the seconds until the next try.

        `endpoint`: the base URL that was down (not the input's fault): the wait ends
        when it answers again (`endpoint_up`)."""
        count = self._failures.get(key, (0, 0.0, None))[0] + 1
        delay = self.base * 2 ** min(count - 1, MAX_DOUBLINGS)
        self._failures[key] = (count, self.clock() + delay, endpoint)
        return delay

    def succeeded(self, key: Hashable) -> None:
        """Forget `key`'s failures."""
        self._failures.pop(key, None)

    def endpoint_up(self, endpoint: str) -> None:
        """Forget the failures of every key whose endpoint was down: it answered again."""
        for key in [k for k, entry in self._failures.items() if entry[2] == endpoint]:
            del self._failures[key]


@dataclass
class Runs:
    """At most one task per key: the work of a key already running is joined, not doubled."""

    _tasks: dict[Hashable, asyncio.Task[Any]] = field(default_factory=dict)

    def running(self, key: Hashable) -> asyncio.Task[Any] | None:
        """Return the key's task while it runs."""
        task = self._tasks.get(key)
        return task if task is not None and not task.done() else None

    def start(self, key: Hashable, work: Callable[[], Awaitable[Any]]) -> asyncio.Task[Any]:
        """Return the key's running task, or start `work` as it."""
        task = self.running(key)
        if task is not None:
            return task

        async def run() -> Any:
            return await work()

        # Background: it takes only its share of the pool (src/storage/pg_client.py); its
        # model calls say whose they are (src/graph/memory/idle.py).
        context = background_context()
        context.run(mark_work, key)
        task = asyncio.create_task(run(), context=context)
        self._tasks[key] = task
        task.add_done_callback(lambda done: self._forget(key, done))
        return task

    def cancel(self, keys: Iterable[Hashable]) -> int:
        """Cancel the tasks of these keys that still run (the owner's memory is being
        erased); return how many were."""
        cancelled = 0
        for key in keys:
            task = self.running(key)
            if task is not None:
                task.cancel()
                cancelled += 1
        return cancelled

    def _forget(self, key: Hashable, task: asyncio.Task[Any]) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
        if not task.cancelled():
            task.exception()  # retrieved: its caller logged it, or nobody waits any more

    async def drain(self) -> None:
        """Wait until every task has finished."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)
