"""Repeating jobs of the bot: reminders (seed 000), session ends (seed 001), upkeep."""

from __future__ import annotations

import logging
from typing import Any

from telegram.error import BadRequest, Forbidden
from telegram.ext import ContextTypes

from src.bot.sending import send_text
from src.bot.state import BotState, state_of
from src.services.pending_facts import PendingFacts
from src.services.reminders import RecipientGone, ReminderStats
from src.storage.tasks_repo import TaskRepository

logger = logging.getLogger(__name__)

# How often the bot looks for messages still without an embedding.
EMBED_CHECK_SECONDS = 60.0

App = Any  # telegram.ext.Application with whatever generic parameters the builder chose


async def send_reminders(app: App) -> ReminderStats:
    """Remind every user who is due now, and still admitted, through the application's bot."""
    state = state_of(app)
    if state.reminders is None:
        raise RuntimeError("reminders are not set up (post_init has not run)")
    bot = app.bot

    async def send(chat_id: int, text: str) -> None:
        try:
            await send_text(bot, chat_id, text)
        except Forbidden as exc:
            raise RecipientGone(exc.message) from exc
        except BadRequest as exc:
            if "chat not found" in exc.message.lower():
                raise RecipientGone(exc.message) from exc
            raise

    return await state.reminders.run_once(send, state.access.admits_owner)


async def reminders_job(context: ContextTypes.DEFAULT_TYPE) -> None:
    """Job: send the reminders that are due."""
    await send_reminders(context.application)


async def retry_kept_facts(app: App) -> int:
    """Extract the facts /new kept whose retry is due, of admitted owners; return how many
    facts were stored."""
    state = state_of(app)
    return await PendingFacts(state.service.deps).retry_due(admits=state.access.admits_owner)


async def compaction_job(context: ContextTypes.DEFAULT_TYPE) -> None:
    """Job: end and compact sessions idle for SESSION_IDLE_MINUTES, of admitted owners,
    and try again the facts kept from sessions /new ended."""
    state = state_of(context)
    await state.service.compact_idle_sessions(admits=state.access.admits_owner)
    await retry_kept_facts(context.application)


async def prune_job(context: ContextTypes.DEFAULT_TYPE) -> None:
    """Job: keep the last CHECKPOINT_KEEP turns of checkpoints per conversation, and
    delivered updates and replies, and scheduled tasks' claimed slots (with the tasks
    ended), for two days (past any redelivery by Telegram or rerun of a job)."""
    from src.devtools.prune import prune_checkpoints

    state = state_of(context)
    if state.runtime is None:
        return
    counts = await prune_checkpoints(state.runtime.pool, state.settings.checkpoint_keep)
    logger.info("checkpoints pruned: %s", counts)
    replies = await state.service.deps.delivery.prune()
    logger.info("delivered updates pruned (%d replies)", replies)
    runs, tasks = await TaskRepository(state.runtime.pool).prune()
    logger.info("scheduled tasks pruned: %d slots run, %d tasks ended", runs, tasks)


async def embedding_job(context: ContextTypes.DEFAULT_TYPE) -> None:
    """Job: embed messages still waiting (after a provider outage, or from before)."""
    runtime = state_of(context).runtime
    if runtime is not None and runtime.embeddings is not None:
        runtime.embeddings.kick()


def compaction_interval_minutes(idle_minutes: float) -> float:
    """Return how often to look for idle sessions: a sixth of the idle time, 1-10 min."""
    return max(1.0, min(10.0, idle_minutes / 6))


def schedule_jobs(app: App, state: BotState) -> list[str]:
    """Schedule the repeating jobs on the application's job queue; return their names."""
    queue = app.job_queue
    if queue is None:
        logger.warning("no job queue (python-telegram-bot[job-queue] missing): no reminders")
        return []
    settings, names = state.settings, []
    every = settings.remind_check_minutes * 60
    queue.run_repeating(reminders_job, interval=every, first=min(every, 60.0), name="reminders")
    names.append("reminders")
    every = compaction_interval_minutes(settings.session_idle_minutes) * 60
    queue.run_repeating(compaction_job, interval=every, first=every, name="compaction")
    names.append("compaction")
    queue.run_repeating(embedding_job, interval=EMBED_CHECK_SECONDS, first=5.0, name="embeddings")
    names.append("embeddings")
    day = 24 * 3600.0
    queue.run_repeating(prune_job, interval=day, first=600.0, name="prune-checkpoints")
    names.append("prune-checkpoints")
    return names
