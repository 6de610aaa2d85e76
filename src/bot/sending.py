"""Send replies (split, formatted, with a plain-text fallback) and show "typing..."."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
from telegram import Bot, Message
from telegram.constants import ChatAction
from telegram.error import BadRequest, Forbidden, NetworkError, TelegramError

from src.bot.formatting import refuses_formatting, reply_parts, split_message

logger = logging.getLogger(__name__)

TYPING_EVERY = 4.0  # Telegram shows "typing..." for about 5 s after each action
# Pauses before sending again a message that never reached Telegram: about 15 s of Bot API
# outage is bridged. Only failures before the request left are retried (a timeout may
# have delivered it, and sending again would show it twice).
RESEND_AFTER = (0.5, 1.0, 2.0, 4.0, 8.0)
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


async def _deliver(send: Callable[..., Awaitable[object]], *args: Any, **kwargs: Any) -> None:
    """Call `send(*args, **kwargs)`; again after a pause each time it could not reach Telegram."""
    for pause in (*RESEND_AFTER, None):
        try:
            await send(*args, **kwargs)
            return
        except NetworkError as exc:
            if pause is None or not isinstance(exc.__cause__, _NEVER_SENT):
                raise
            logger.warning("Telegram unreachable (%s): sending again in %.1f s", exc, pause)
        await asyncio.sleep(pause)


async def reply_text(message: Message, text: str, fmt: str = "plain", quote: bool = False) -> int:
    """Answer `message` with `text` in as many messages as it takes; return how many.

    `fmt="markdown"` renders the model's Markdown as text plus entities; a part whose
    formatting Telegram refuses is sent again unformatted. `quote` replies to the message
    (groups).
    """
    parts = reply_parts(text, fmt)
    if not parts:
        logger.warning("empty reply for chat %s: nothing sent", message.chat_id)
    for i, part in enumerate(parts):
        do_quote = quote and i == 0
        try:
            await _deliver(
                message.reply_text, part.text, entities=part.entities or None, do_quote=do_quote
            )
        except BadRequest as exc:
            if not (part.entities and refuses_formatting(exc)):
                raise
            logger.info("Telegram rejected formatting (%s): sending plain text", exc.message)
            await _deliver(message.reply_text, part.text, do_quote=do_quote)
    return len(parts)


async def send_text(bot: Bot, chat_id: int, text: str) -> None:
    """Send `text` to a chat unprompted (reminders), split to Telegram's limit."""
    for chunk in split_message(text):
        await _deliver(bot.send_message, chat_id, chunk)


async def _keep_typing(bot: Bot, chat_id: int, thread_id: int | None) -> None:
    while True:
        try:
            await bot.send_chat_action(chat_id, ChatAction.TYPING, message_thread_id=thread_id)
        except Forbidden:
            return
        except TelegramError as exc:
            # "typing..." is a courtesy: its failures must never disturb the turn.
            logger.debug("chat action for %s failed: %s", chat_id, exc)
        await asyncio.sleep(TYPING_EVERY)


@contextlib.asynccontextmanager
async def typing(message: Message) -> AsyncIterator[None]:
    """Show "typing..." in the message's chat, renewed every few seconds, while the block runs."""
    thread_id = message.message_thread_id if message.is_topic_message else None
    task = asyncio.create_task(_keep_typing(message.get_bot(), message.chat_id, thread_id))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
