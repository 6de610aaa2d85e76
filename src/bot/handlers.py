"""Telegram handlers: the gate, messages, errors; each turns an Update into a service call."""

from __future__ import annotations

import logging
from typing import Any

from telegram import Update
from telegram.constants import ChatType
from telegram.error import Forbidden, RetryAfter, TelegramError
from telegram.ext import (
    Application,
    ApplicationHandlerStop,
    CommandHandler,
    MessageHandler,
    TypeHandler,
    filters,
)

from src.bot.chats import (
    group_turn_text,
    identity_of,
    is_addressed,
    is_anonymous_admin,
    is_private,
    turn_text,
)
from src.bot.commands import COMMANDS, Context, cmd_unknown, lang_of_message, message_of, say
from src.bot.sending import reply_text, typing
from src.bot.state import state_of
from src.services.texts import t

logger = logging.getLogger(__name__)


# --- the gate: runs first for every update -------------------------------------------------


async def gate(update: object, context: Context) -> None:
    """Let through only new messages meant for the bot, from allowed users, within the limit.

    Runs before every other handler and before anything is stored: edited messages,
    channel posts, service messages, other bots and group chatter not addressed to the bot
    end here in silence; refused users get one polite sentence.
    """
    if not isinstance(update, Update) or update.message is None:
        raise ApplicationHandlerStop
    message = update.message
    if message.from_user is None or filters.StatusUpdate.ALL.check_update(update):
        raise ApplicationHandlerStop
    # Other bots are ignored (no bot-to-bot loops), except a group's anonymous admin.
    if message.from_user.is_bot and not is_anonymous_admin(message):
        raise ApplicationHandlerStop
    if not is_addressed(message, context.bot.username, context.bot.id):
        raise ApplicationHandlerStop
    state, user, lang = state_of(context), message.from_user, message.from_user.language_code
    # The allowlist first: a stranger is told "not allowed", and spends no one's window.
    if not state.access.allows(user.id, message.chat.id):
        logger.info("refused user %s in chat %s", user.id, message.chat.id)
        await say(message, t("not_allowed", lang))
        raise ApplicationHandlerStop
    if not state.access.is_admin(user.id) and not state.limiter.allow(user.id):
        logger.debug("rate limit: dropping a message of user %s", user.id)
        if state.limiter.should_notify(user.id):
            logger.info("user %s is over the rate limit", user.id)
            await say(message, t("rate_limited", lang))
        raise ApplicationHandlerStop


# --- messages ------------------------------------------------------------------------------


async def on_text(update: Update, context: Context) -> None:
    """A text (or a caption): one turn of the conversation, "typing..." while it runs."""
    message = message_of(update)
    state, lang = state_of(context), lang_of_message(message)
    text = turn_text(message, context.bot.username)
    refusal = state.service.check_input(text, lang)
    if refusal is not None:
        await say(message, refusal)
        return
    async with state.order.hold(message.chat_id), typing(message):
        result = await state.service.handle_message(
            identity_of(message), group_turn_text(message, text)
        )
        fmt = state.settings.telegram_reply_format if result.ok else "plain"
        await reply_text(message, result.reply, fmt, quote=not is_private(message))


async def on_other(update: Update, context: Context) -> None:
    """Photos, stickers, voice, documents...: say that only text is understood."""
    message = message_of(update)
    await say(message, t("not_text", lang_of_message(message)))


# --- errors --------------------------------------------------------------------------------


async def on_error(update: object, context: Context) -> None:
    """Log every error with its traceback; tell the user, where there is one, that it failed."""
    error = context.error
    update_id = update.update_id if isinstance(update, Update) else None
    if isinstance(error, Forbidden):  # the user blocked the bot: nothing is broken
        logger.info("update %s: cannot write to the chat: %s", update_id, error)
        await _stop_reminding(update, context, error)
        return
    logger.error("error while handling update %s", update_id, exc_info=error)
    if not isinstance(update, Update) or update.effective_message is None:
        return
    if isinstance(error, RetryAfter):
        return  # Telegram asks us to be quiet: saying more would fail too
    message = update.effective_message
    try:
        await message.reply_text(t("internal_error", lang_of_message(message)))
    except TelegramError as exc:
        logger.warning("could not report the error to chat %s: %s", message.chat_id, exc)


async def _stop_reminding(update: object, context: Context, error: Forbidden) -> None:
    """Turn reminders off for a private chat that refuses replies: they would bounce too."""
    chat = update.effective_chat if isinstance(update, Update) else None
    reminders = state_of(context).reminders
    if chat is None or chat.type != ChatType.PRIVATE or reminders is None:
        return
    try:
        await reminders.recipient_gone(chat.id, error.message)
    except Exception:
        logger.warning("could not turn reminders off for %s", chat.id, exc_info=True)


def register(app: Application[Any, Any, Any, Any, Any, Any]) -> None:
    """Add the gate, the commands, the message handlers and the error handler."""
    app.add_handler(TypeHandler(Update, gate), group=-1)
    for name, callback in COMMANDS.items():
        app.add_handler(CommandHandler(name, callback))
    app.add_handler(MessageHandler(filters.COMMAND, cmd_unknown))
    app.add_handler(MessageHandler(filters.TEXT | filters.CAPTION, on_text))
    app.add_handler(MessageHandler(~filters.StatusUpdate.ALL, on_other))
    app.add_error_handler(on_error)
