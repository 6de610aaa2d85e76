"""The workers' side of the inbox: procrastinate runs one job per stored update.

Jobs of one chat share a procrastinate lock, so they run one at a time in the order they
were stored, across every process (`tgagent bot` and any number of `tgagent worker`);
different chats run concurrently, WORKER_CONCURRENCY per process. A job whose process
died (SIGKILL, OOM, a lost machine) is found by its worker's missing heartbeat after
WORKER_STALLED_SECONDS and runs again: a turn that stored its reply only sends it (the
outbox), one that stored only the user's message runs on that message. Scheduled tasks
ride the same queue: a job at each slot claims it, and the run it stores in the inbox is a
job of its chat like an update (src/bot/task_runs.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from procrastinate import App as TaskApp
from procrastinate import JobContext, PsycopgConnector, RetryStrategy
from telegram import Update
from telegram.error import TelegramError

from src.bot.chats import migration_of
from src.bot.handlers import ADMITTED
from src.bot.state import BotState
from src.bot.task_runs import TaskRunner
from src.services.agent_service import DB_ERRORS
from src.services.texts import t
from src.storage.delivery_repo import QUEUE, UPDATE_TASK, DeliveryRepository
from src.storage.tasks_repo import DUE_TASK

logger = logging.getLogger(__name__)

TASK = UPDATE_TASK
# A job started this often without finishing (its process died each time) is dropped
# with one sentence to the user instead of killing the next worker too.
MAX_ATTEMPTS = 5
# procrastinate's own connections: its LISTEN connection, fetching and finishing jobs.
QUEUE_CONNECTIONS = 4
# A job that cannot reach the database (a restart, a pool exhausted under load) tries
# again within itself, waiting longer each time up to DB_WAIT_MAX, for DB_PATIENCE
# seconds; then procrastinate runs it again after DB_RETRY_SECONDS, MAX_ATTEMPTS times
# in all, the last of which apologizes. Failing the job would lose the message.
DB_WAIT_MAX = 10.0
DB_PATIENCE = 300.0
DB_RETRY_SECONDS = 30
# A slot's claim that failed is tried again every few seconds, for about an hour.
DUE_RETRY = RetryStrategy(max_attempts=600, wait=6)


class UpdateWorker:
    """Run the inbox's jobs through the bot's Application until stopped."""

    def __init__(self, app: Any, state: BotState, dsn: str) -> None:
        self.app = app
        self.state = state
        settings = state.settings
        self.stalled_after = settings.worker_stalled_seconds
        self.concurrency = settings.worker_concurrency
        connector = PsycopgConnector(
            conninfo=dsn, min_size=1, max_size=QUEUE_CONNECTIONS, name="tgagent-queue"
        )
        self.tasks = TaskApp(connector=connector)
        retry = RetryStrategy(
            max_attempts=MAX_ATTEMPTS, wait=DB_RETRY_SECONDS, retry_exceptions=set(DB_ERRORS)
        )
        self.tasks.task(name=TASK, queue=QUEUE, pass_context=True, retry=retry)(self.handle)
        # Scheduled tasks' slots (src/bot/task_runs.py): a claim that failed (the
        # database went away) is tried again, not dropped with the task's future.
        self.runner = TaskRunner(app, state)
        self.tasks.task(name=DUE_TASK, queue=QUEUE, retry=DUE_RETRY)(self.runner.due)
        self.running = asyncio.Event()
        self.stopping = asyncio.Event()

    @property
    def repo(self) -> DeliveryRepository:
        return self.state.service.deps.delivery

    async def run(self, stop: asyncio.Event) -> None:
        """Work until `stop` is set; running jobs finish first (their turns end cleanly:
        procrastinate's graceful shutdown has no time limit, and a model call has its
        timeout)."""
        self.stopping = stop
        async with self.tasks.open_async():
            recovery = asyncio.create_task(self._recover_forever(stop))
            try:
                while not stop.is_set():
                    await self._work_until(stop)
            finally:
                recovery.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await recovery
                self.running.clear()

    async def _work_until(self, stop: asyncio.Event) -> None:
        """Run procrastinate's worker until `stop`; if it dies (the database went away,
        which ends its LISTEN), log it, wait a moment and let `run` start another."""
        worker = asyncio.create_task(
            self.tasks.run_worker_async(
                queues=[QUEUE],
                concurrency=self.concurrency,
                install_signal_handlers=False,
                delete_jobs="successful",
                update_heartbeat_interval=self.stalled_after / 3,
                stalled_worker_timeout=self.stalled_after,
                # LISTEN/NOTIFY wakes it at once; polling covers a missed notification.
                fetch_job_polling_interval=1.0,
            )
        )
        self.running.set()
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({worker, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not worker.done():
            worker.cancel()  # procrastinate stops gracefully: running jobs finish
        try:
            await worker
        except asyncio.CancelledError:
            if not stop.is_set():
                raise
        except Exception:
            logger.error("the queue worker stopped; starting it again", exc_info=True)
            self.running.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 2.0)

    async def _recover_forever(self, stop: asyncio.Event) -> None:
        """Send the jobs of dead workers back to the queue, every few seconds."""
        manager = self.tasks.job_manager
        while not stop.is_set():
            try:
                stalled = await manager.get_stalled_jobs(
                    queue=QUEUE, seconds_since_heartbeat=self.stalled_after
                )
                for job in stalled:
                    logger.warning("job %s of a dead worker runs again", job.id)
                    with contextlib.suppress(Exception):  # another process was quicker
                        await manager.retry_job(job)
            except Exception:
                logger.warning("could not look for jobs of dead workers", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.stalled_after / 3)

    async def handle(self, context: JobContext, update_id: int) -> None:
        """Process one stored update, waiting for the database while it cannot be reached.

        Each try starts over, as a run after a dead worker does: a turn that stored its
        reply only sends it, one that stored the user's message runs on that message.
        """
        loop = asyncio.get_running_loop()
        give_up, wait = loop.time() + DB_PATIENCE, 0.5
        while True:
            try:
                return await self._handle(context, update_id)
            except DB_ERRORS as exc:
                if self.stopping.is_set() or loop.time() + wait > give_up:
                    raise  # procrastinate runs it again later (the task's RetryStrategy)
                logger.warning("update %s waits %.1f s for the database: %s", update_id, wait, exc)
                await asyncio.sleep(wait)
                wait = min(2 * wait, DB_WAIT_MAX)

    async def _handle(self, context: JobContext, update_id: int) -> None:
        """Process one stored update: its turn, or only the sending of its stored reply."""
        row = await self.repo.inbox_row(update_id)
        if row is None or row["done_at"] is not None:
            return
        attempts = context.job.attempts
        reply = await self.repo.reply(update_id)
        if reply is not None and "task_run" in row["payload"]:
            # A task's answer stored before its worker died, or held for a chat that
            # writes again: sent, or kept while the chat cannot be reached.
            await self.runner.deliver(row["payload"]["task_run"], reply)
        elif reply is not None:
            # The turn ran and stored its reply before its worker died: only send it.
            await self.state.outbox.deliver(self.app.bot, reply)
        elif attempts >= MAX_ATTEMPTS:
            logger.error("update %s dropped after %d attempts", update_id, attempts)
            await self._apologize(row["payload"])
        elif "task_run" in row["payload"]:
            await self.runner.run(update_id, row["payload"]["task_run"])
        else:
            update = Update.de_json(row["payload"], self.app.bot)
            moved = migration_of(update)
            if moved is not None:
                await self._migrated(*moved)
            else:
                token = ADMITTED.set(True)  # counted against the rate limit when received
                try:
                    await self.app.process_update(update)
                finally:
                    ADMITTED.reset(token)
        await self.repo.finish(update_id)

    async def _migrated(self, old: int, new: int) -> None:
        """The group `old` is the supergroup `new` now: move its rows there. A failure
        other than the database's is logged: the next reply to the old id meets
        ChatMigrated and moves them then."""
        try:
            await self.state.chat_migrated(old, new)
        except DB_ERRORS:
            raise
        except Exception:
            logger.warning("could not move group %s to %s", old, new, exc_info=True)

    async def _apologize(self, payload: dict[str, Any]) -> None:
        message = payload.get("message") or {}
        chat = (message.get("chat") or {}).get("id")
        lang = (message.get("from") or {}).get("language_code")
        if chat is None:
            return
        try:
            await self.app.bot.send_message(chat, t("internal_error", lang))
        except TelegramError as exc:
            logger.warning("could not tell chat %s its update failed: %s", chat, exc)
