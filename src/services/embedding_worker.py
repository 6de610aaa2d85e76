"""Embed stored messages in the background, never on the reply path.

After each turn the service calls `kick()`; one task per process then embeds pending
messages in batches until none is left. A batch is fair per owner: the owners with
pending messages take turns (a cursor over owner ids), each with its newest messages
first, so one owner's backlog never holds another's new messages. A failing provider is
retried with a growing pause; the messages stay pending meanwhile and lexical search
answers alone. A message the provider refuses (its input is at fault) is found by
embedding the batch one by one, marked and left. Several processes may run workers on
one database: a message embedded twice is stored once (an upsert), so no lock is
needed. `tgagent db embed` runs the same loop to backfill.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from src.graph.deps import Embedder
from src.services.embeddings import RejectedInput
from src.storage.embedding_repo import EmbeddingRepository, Pending
from src.storage.pg_client import background_context

logger = logging.getLogger(__name__)

# Pause after a failure: doubles from FIRST_BACKOFF up to MAX_BACKOFF seconds.
FIRST_BACKOFF = 2.0
MAX_BACKOFF = 300.0
# Messages of another model queued again per round after EMBEDDING_MODEL changed.
REQUEUE_BATCH = 1000
# A text any provider takes: asked when it refused every message of a batch.
PROBE = "ok"
# Below every owner id (groups' are negative): where the owner cursor starts.
FIRST_OWNER = -(2**63)


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
        self.refused = 0
        """Messages the provider refused, marked and left out of the queue."""
        self._again = False
        self._retry_at = 0.0
        self._after = FIRST_OWNER
        self._requeue: bool | None = None

    def kick(self) -> None:
        """Make sure pending messages get embedded soon; return at once."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        if self.clock() < self._retry_at:
            return  # backing off after a failure; a later kick retries
        self._task = asyncio.create_task(
            self._loop(), name="embed-messages", context=background_context()
        )

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
        """Embed one batch of pending messages; return how many were embedded, refused
        or queued again for a new model (0: nothing left to do)."""
        if self._requeue is None:
            # Once per worker: the configured model against the stored one.
            self._requeue = await self.repo.adopt_model(self.embedder.model)
        items = await self._next_batch()
        if not items:
            if not self._requeue:
                return 0
            # Nothing new: give messages embedded by an earlier model back to the queue.
            count = await self.repo.requeue_other_models(self.embedder.model, REQUEUE_BATCH)
            self._requeue = count > 0
            return count
        try:
            vectors = await self.embedder.passages([p.text for p in items])
        except RejectedInput:
            done = await self._one_by_one(items)
        else:
            await self.repo.store(self.embedder.model, items, vectors)
            self.embedded += len(items)
            done = len(items)
        self.failures = 0
        return done

    async def _next_batch(self) -> list[Pending]:
        """Return the next batch: the next owners' newest pending messages, in turns."""
        owners = await self.repo.pending_owners(self._after, self.batch)
        if len(owners) < self.batch and self._after != FIRST_OWNER:
            # The end of the owners: the round goes on from the first.
            again = await self.repo.pending_owners(FIRST_OWNER, self.batch - len(owners))
            owners += [o for o in again if o <= self._after]
        if not owners:
            return []
        batch = await self.repo.pending(owners, self.batch)
        self._after = owners[-1]
        return batch

    async def _one_by_one(self, items: list[Pending]) -> int:
        """Embed a refused batch one message at a time; mark the ones refused alone.

        When every one is refused, a probe tells a provider that refuses everything (a
        wrong option: it is failing, retried later) from messages that are all bad."""
        refused: list[tuple[Pending, RejectedInput]] = []
        for item in items:
            try:
                vector = await self.embedder.passages([item.text])
            except RejectedInput as exc:
                refused.append((item, exc))
                continue
            await self.repo.store(self.embedder.model, [item], vector)
            self.embedded += 1
        if len(refused) == len(items):
            await self.embedder.passages([PROBE])  # refused too: raises, backs off
        for item, error in refused:
            logger.warning("embedding refused message %d, left unembedded: %s", item.id, error)
            await self.repo.quarantine(self.embedder.model, [item], str(error)[:300])
        self.refused += len(refused)
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
