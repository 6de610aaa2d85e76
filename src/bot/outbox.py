"""Send a stored reply until Telegram accepts it or finally refuses it.

Each part Telegram accepts is recorded with its message id before the next one is sent,
so a resend after a crash starts at the first part not sent. 429 waits `retry_after`
(as often as Telegram asks), 5xx and timeouts retry with backoff, 403 marks the reply
`blocked` (the user blocked the bot) and the chat unreachable (`on_blocked`: nothing more
goes to it until it writes again; a scheduled task's answer is then kept for it,
src/bot/task_runs.py), a 400 about the part's formatting sends it again
unformatted, a group upgraded to a supergroup (ChatMigrated) moves the group's rows to its
new id and sends there at once, a topic Telegram no longer has ("message thread not
found": deleted, and Telegram tells bots nothing when a topic is deleted) marks it
`rejected` and ends the topic's session (`on_thread_gone`), and any other 400 marks it
`rejected`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from telegram import Bot, Message, ReplyParameters
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    NetworkError,
    RetryAfter,
    TelegramError,
)

from src.bot.formatting import Part, refuses_formatting, reply_parts
from src.storage.delivery_repo import DeliveryRepository, Reply

logger = logging.getLogger(__name__)

# What Telegram answers a send into a topic it does not have (a deleted one).
THREAD_GONE = "message thread not found"
# Why a reply with no text is rejected before it is sent: Telegram's own words for it.
EMPTY_TEXT = "Bad Request: message text is empty"
# deliver's status for a reply whose topic is gone (stored as `rejected`).
TOPIC_GONE = "topic_gone"
# Pauses between attempts after a 5xx or a timeout: about 15 minutes in all, then the
# reply is marked failed (it stays stored, with the error, for an operator to see).
BACKOFF = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 60.0, 120.0, 300.0, 300.0)


class Outbox:
    """Deliver the replies the inbox's turns stored (see DeliveryRepository)."""

    def __init__(
        self,
        repo: DeliveryRepository,
        on_blocked: Callable[[int, str], Awaitable[None]] | None = None,
        backoff: tuple[float, ...] = BACKOFF,
        on_migrated: Callable[[int, int], Awaitable[None]] | None = None,
        on_thread_gone: Callable[[int, int], Awaitable[None]] | None = None,
    ) -> None:
        self.repo = repo
        self.on_blocked = on_blocked
        self.on_migrated = on_migrated
        self.on_thread_gone = on_thread_gone
        """Called with the chat and the topic when Telegram no longer has the topic."""
        self.backoff = backoff

    async def deliver(
        self, bot: Bot, reply: Reply, live_id: int | None = None, edit_at: float = 0.0
    ) -> str:
        """Send what Telegram has not accepted yet of `reply`; return its final status.

        `live_id`: the message that showed the reply while it was written (src/bot/live.py);
        the reply's first part replaces its text (and its Stop button) instead of
        coming as a new message, not before the loop time `edit_at` (a second after the
        last live edit: Telegram allows about one edit a second in a group).
        """
        if reply.status != "pending":
            return reply.status
        if live_id is not None and reply.sent_ids:
            live_id = None  # the first part went out already
        chunks = reply_parts(reply.text, reply.fmt)
        if not chunks:
            # Telegram refuses an empty text: never marked sent, the user is told.
            logger.warning("empty reply to update %s: rejected", reply.update_id)
            await self.repo.close(reply.update_id, "rejected", EMPTY_TEXT, reply.kind)
            return "rejected"
        for index in range(len(reply.sent_ids), len(chunks)):
            replacing = live_id if index == 0 else None
            if replacing is not None:
                await asyncio.sleep(max(0.0, edit_at - asyncio.get_running_loop().time()))
            status = await self._send_part(bot, reply, chunks[index], index == 0, replacing)
            if status != "sent":
                return status
        await self.repo.close(reply.update_id, "sent", kind=reply.kind)
        reply.status = "sent"
        return "sent"

    async def _send_part(
        self, bot: Bot, reply: Reply, chunk: Part, first: bool, live_id: int | None = None
    ) -> str:
        plain = not chunk.entities
        failures = 0
        while True:
            try:
                if live_id is not None:
                    sent_id = await self._replace(bot, reply, live_id, chunk, plain)
                    if sent_id is None:
                        live_id = None  # gone or refused: the part comes as a new message
                        continue
                else:
                    sent_id = (await self._send(bot, reply, chunk, plain, quote=first)).message_id
            except RetryAfter as exc:
                # Telegram says when: wait exactly that long, as often as it asks.
                wait = exc.retry_after
                seconds = wait if isinstance(wait, int | float) else wait.total_seconds()
                logger.info("reply to %s: flood limit, again in %.0f s", reply.update_id, seconds)
                await self.repo.record_attempt(
                    reply.update_id, f"429 retry after {seconds}", reply.kind
                )
                await asyncio.sleep(seconds)
                continue
            except ChatMigrated as exc:
                # The group is a supergroup now: its rows (this reply's too) move to the
                # new id, and the part goes there; the live message stays behind.
                logger.info("chat %s is now %s", reply.chat_id, exc.new_chat_id)
                if self.on_migrated is not None:
                    await self.on_migrated(reply.chat_id, exc.new_chat_id)
                reply.chat_id, reply.thread_id, reply.reply_to = exc.new_chat_id, None, None
                live_id = None
                continue
            except Forbidden as exc:
                logger.info("cannot write to the chat %s: %s", reply.chat_id, exc.message)
                await self.repo.close(reply.update_id, "blocked", exc.message, reply.kind)
                if self.on_blocked is not None:
                    await self.on_blocked(reply.chat_id, exc.message)
                return "blocked"
            except BadRequest as exc:
                if not plain and refuses_formatting(exc):
                    logger.info("Telegram rejected formatting (%s): plain text", exc.message)
                    plain = True
                    continue
                logger.warning("reply to %s rejected: %s", reply.update_id, exc.message)
                await self.repo.close(reply.update_id, "rejected", exc.message, reply.kind)
                if reply.thread_id and THREAD_GONE in exc.message.lower():
                    # Sent once: the topic is deleted, a later try would fail the same.
                    if self.on_thread_gone is not None:
                        await self.on_thread_gone(reply.chat_id, reply.thread_id)
                    return TOPIC_GONE
                return "rejected"
            except (NetworkError, TelegramError) as exc:
                # 5xx, timeouts, connection failures: a timeout may have delivered the
                # part already, the one case a part can show twice.
                if failures >= len(self.backoff):
                    logger.error("reply to %s failed for good: %s", reply.update_id, exc)
                    await self.repo.close(reply.update_id, "failed", str(exc), reply.kind)
                    return "failed"
                pause = self.backoff[failures]
                failures += 1
                logger.warning(
                    "reply to %s not sent (%s): again in %.0f s", reply.update_id, exc, pause
                )
                await self.repo.record_attempt(reply.update_id, str(exc), reply.kind)
                await asyncio.sleep(pause)
                continue
            await self.repo.record_sent(reply.update_id, sent_id, reply.kind)
            reply.sent_ids.append(sent_id)
            return "sent"

    @staticmethod
    async def _replace(
        bot: Bot, reply: Reply, live_id: int, chunk: Part, plain: bool
    ) -> int | None:
        """Make the live message the reply's first part; None if it cannot be edited
        (deleted, too old...): it is then deleted, and the part sent anew."""
        try:
            await bot.edit_message_text(
                chunk.text, reply.chat_id, live_id, entities=None if plain else chunk.entities
            )
        except BadRequest as exc:
            text = exc.message.lower()
            if "not modified" in text:
                return live_id  # it shows the final text already
            if refuses_formatting(exc):
                raise
            logger.info("live message %s not edited (%s): sent anew", live_id, exc.message)
            with contextlib.suppress(TelegramError):
                await bot.delete_message(reply.chat_id, live_id)
            return None
        return live_id

    @staticmethod
    async def _send(bot: Bot, reply: Reply, chunk: Part, plain: bool, quote: bool) -> Message:
        quoted = (
            ReplyParameters(reply.reply_to, allow_sending_without_reply=True)
            if quote and reply.reply_to is not None
            else None
        )
        return await bot.send_message(
            reply.chat_id,
            chunk.text,
            entities=None if plain else chunk.entities,
            message_thread_id=reply.thread_id,
            reply_parameters=quoted,
        )
