"""Embed stored messages in the background, never on the reply path.

After each turn the service calls `kick()`; one task per process then embeds pending
messages (any owner, oldest first) in batches until none is left. A failing provider is
retried with a growing pause; the messages stay pending meanwhile and lexical search
answers alone. Several processes may run workers on one database: a message embedded
twice is stored once (an upsert), so no lock is needed. `tgagent db embed` runs the same
loop to backfill.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from src.graph.deps import Embedder
from src.storage.embedding_repo import EmbeddingRepository

logger = logging.getLogger(__name__)

# Pause after a failure: doubles from FIRST_BACKOFF up to MAX_BACKOFF seconds.
FIRST_BACKOFF = 2.0
MAX_BACKOFF = 300.0
# Messages of another model queued again per round after EMBEDDING_MODEL changed.
REQUEUE_BATCH = 1000


class EmbeddingWorker:
    """Embeds pending messages with one embedder, one batch at a time."""

    def __init__(
        self,
        repo: EmbeddingRepository,
        embedder: Embedder,
        batch: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.repo = repo
        self.embedder = embedder
        self.batch = batch
        self.clock = clock
        self.embedded = 0
        """Messages embedded by this worker since it started."""
        self.failures = 0
        """Failed batches in a row (0 after a success)."""
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._retry_at = 0.0

    def kick(self) -> None:
        """Make sure pending messages get embedded soon; return at once."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        if self.clock() < self._retry_at:
            return  # backing off after a failure; a later kick retries
        self._task = asyncio.create_task(self._loop(), name="embed-messages")

    async def _loop(self) -> None:
        while True:
            self._again = False
            try:
                while await self.run_once():
                    pass
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any provider or database failure: retry later
                self.failures += 1
                pause = min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** (self.failures - 1))
                self._retry_at = self.clock() + pause
                logger.warning(
                    "embedding failed (%d in a row), retrying in %.0f s: %s: %s",
                    self.failures,
                    pause,
                    type(exc).__name__,
                    exc,
                )
                return
            if not self._again:
                return

    async def run_once(self) -> int:
        """Embed one batch of pending messages; return how many were embedded or queued
        again for a new model (0: nothing left to do)."""
        items = await self.repo.pending(self.batch)
        if not items:
            # Nothing new: give messages embedded by an earlier model back to the queue.
            return await self.repo.requeue_other_models(self.embedder.model, REQUEUE_BATCH)
        vectors = await self.embedder.passages([p.text for p in items])
        await self.repo.store(self.embedder.model, items, vectors)
        self.embedded += len(items)
        self.failures = 0
        return len(items)

    async def drain(self) -> None:
        """Wait for the running batch loop, if any, to finish."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def close(self) -> None:
        """Stop the background loop; what is pending stays pending for the next start."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
