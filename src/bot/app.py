"""The composition root of the Telegram bot: build the Application, run it, stop it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from telegram.ext import AIORateLimiter, Application, BaseRateLimiter, CommandHandler
from telegram.request import BaseRequest

from src.bot import handlers
from src.bot.data_commands import DATA_COMMANDS
from src.bot.jobs import schedule_jobs
from src.bot.memory_commands import MEMORY_COMMANDS
from src.bot.menus import publish_menus
from src.bot.outbox import Outbox
from src.bot.queue import UpdateWorker
from src.bot.receive import Receiver
from src.bot.state import BOT_DATA_KEY, BotState, state_of
from src.bot.stops import StopChannel
from src.bot.task_commands import TASK_COMMANDS
from src.config import ConfigError, Settings
from src.services.factory import Runtime, build_runtime
from src.services.reminders import ReminderService

logger = logging.getLogger(__name__)

App = Application[Any, Any, Any, Any, Any, Any]
FLOOD_RETRIES = 3  # times a request is retried after Telegram's 429 retry_after
# httpcore re-examines every pooled connection on each request, in quadratic time, so the
# 256 connections PTB allows make a burst of replies cost more per reply the bigger it is.
# Telegram's flood limits (about 30 messages/s) need few connections: keep the pool small
# and let a burst queue for it, longer than PTB's 1 s pool timeout, which drops replies.
BOT_API_CONNECTIONS = 32
POOL_WAIT = 30.0


def file_base_url(base_url: str) -> str:
    """Derive the file download URL from a Bot API base URL (`.../bot` -> `.../file/bot`)."""
    prefix, _, last = base_url.rstrip("/").rpartition("/")
    return f"{prefix}/file/{last}"


def build_application(
    settings: Settings,
    runtime: Runtime | None = None,
    *,
    request: BaseRequest | None = None,
    rate_limiter: BaseRateLimiter[Any] | None = None,
) -> App:
    """Build the bot: handlers, 429 handling, concurrency, and the runtime's lifecycle.

    Without `runtime`, `post_init` builds one (opening the pool) and `post_shutdown`
    closes it; a given runtime stays the caller's. `request` replaces the HTTP client
    (tests pass one that never touches the network); `rate_limiter` replaces the one
    that keeps to Telegram's flood limits (a fake Bot API server has none to keep to).
    """
    if settings.telegram_bot_token is None:
        raise ConfigError("TELEGRAM_BOT_TOKEN is not set: get a token from @BotFather")
    builder: Any = Application.builder().token(settings.telegram_bot_token.get_secret_value())
    if settings.telegram_api_base_url:
        base = settings.telegram_api_base_url
        builder = builder.base_url(base).base_file_url(file_base_url(base))
    # Updates come through the inbox (src/bot/receive.py), not PTB's updater.
    builder = builder.updater(None)
    if request is not None:
        builder = builder.request(request).get_updates_request(request)
    else:
        builder = builder.connection_pool_size(BOT_API_CONNECTIONS).pool_timeout(POOL_WAIT)
    app: App = (
        builder.rate_limiter(rate_limiter or AIORateLimiter(max_retries=FLOOD_RETRIES))
        # Different chats run concurrently; AgentService keeps each owner's turns in order.
        .concurrent_updates(True)
        .post_init(_post_init)
        .post_shutdown(_post_shutdown)
        .build()
    )
    app.bot_data[BOT_DATA_KEY] = BotState.from_settings(settings, runtime)
    # Before the others: their handler of unknown commands would take these.
    for name, callback in (DATA_COMMANDS | MEMORY_COMMANDS | TASK_COMMANDS).items():
        app.add_handler(CommandHandler(name, callback))
    handlers.register(app)
    return app


async def _post_init(app: App) -> None:
    state = state_of(app)
    if state.runtime is None:
        state.runtime = await build_runtime(state.settings)
        state.owns_runtime = True
    state.runtime.deps.tasks_run = True  # this process (or a worker) runs their jobs
    state.reminders = ReminderService(state.runtime.deps, state.runtime.service.locks)
    state.sender = Outbox(
        state.runtime.deps.delivery,
        on_blocked=state.chat_unreachable,
        on_migrated=state.chat_migrated,
        on_thread_gone=state.topic_gone,
    )
    if state.access.open:
        logger.warning(
            "the bot is open to everyone: set ALLOWED_USER_IDS or ADMIN_USER_IDS to close it"
        )
    await publish_menus(app.bot)
    await state.media.check_transcription()
    schedule_jobs(app, state)
    logger.info("bot @%s ready", app.bot.username)


async def _post_shutdown(app: App) -> None:
    state = state_of(app)
    if state.reader is not None:
        await state.reader.close()
    if state.owns_runtime and state.runtime is not None:
        await state.runtime.close()
        state.runtime, state.owns_runtime = None, False


async def serve(app: App, stop: asyncio.Event, *, receive: bool = True, work: bool = True) -> None:
    """Run the bot until `stop` is set, then stop it cleanly.

    `receive`: take updates from Telegram (a webhook when WEBHOOK_URL is set, else long
    polling) into the inbox. `work`: run the inbox's jobs (turns, commands) and the
    periodic jobs. `tgagent bot` does both; `tgagent worker` only works.
    """
    state = state_of(app)
    await app.initialize()
    tasks: list[asyncio.Task[None]] = []
    listening: asyncio.Task[None] | None = None
    try:
        if app.post_init is not None:
            await app.post_init(app)
        await app.start()
        assert state.runtime is not None
        dsn = state.runtime.pool.conninfo
        assert isinstance(dsn, str)  # make_pool is given a string
        # /stop reaches the process that runs the chat's turn (src/bot/stops.py).
        state.stops = StopChannel(dsn, state.runtime.pool, state.live)
        listening = asyncio.create_task(state.stops.run(), name="stops")
        if work:
            state.worker = UpdateWorker(app, state, dsn)
            tasks.append(asyncio.create_task(state.worker.run(stop), name="worker"))
        if receive:
            state.receiver = receiver = Receiver(app, state)
            receiving = (
                receiver.serve_webhook(stop) if state.settings.webhook_url else receiver.poll(stop)
            )
            tasks.append(asyncio.create_task(receiving, name="receiver"))
        stopping = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({stopping, *tasks}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        for task in done:
            if task is not stopping and task.exception() is not None:
                stop.set()  # one part failed (a refused token...): stop the others
                await asyncio.gather(*tasks, return_exceptions=True)
                task.result()
        await asyncio.gather(*tasks)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        if listening is not None:
            listening.cancel()
            await asyncio.gather(listening, return_exceptions=True)
        if state.receiver is not None:
            await state.receiver.close()
        if app.running:
            await app.stop()
        await app.shutdown()
        if app.post_shutdown is not None:
            await app.post_shutdown(app)
