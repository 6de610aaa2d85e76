"""Telegram handlers: the gate, messages, errors; each turns an Update into a service call."""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from telegram import Bot, Message, Update
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
from src.bot.live import LiveReply
from src.bot.media import (
    MEDIA,
    acknowledgement,
    caption_of,
    gather_album,
    unread,
    until_stopped,
    uploads_of,
)
from src.bot.outbox import TOPIC_GONE
from src.bot.replies import said_text
from src.bot.rights import turn_identity
from src.bot.sending import reply_text, typing
from src.bot.state import BotState, state_of
from src.services.agent_service import DB_ERRORS
from src.services.media import MediaTurn
from src.services.texts import t
from src.storage.delivery_repo import Delivery, Reply

logger = logging.getLogger(__name__)

ACK = "ack"  # the outbox kind of the acknowledgement of documents sent without a question


# --- the gate: runs where updates arrive, and again before every update is handled -----

# Set while the queue's worker handles an update the receiver admitted (and counted
# against the rate limit) when it stored it: the gate then does not count it again.
ADMITTED: ContextVar[bool] = ContextVar("admitted", default=False)


@dataclass(frozen=True)
class Verdict:
    """Whether an update goes on, and what to tell its sender when it does not."""

    accept: bool
    answer: str | None = None


IGNORE = Verdict(False)
ACCEPT = Verdict(True)


def admission(update: object, bot: Bot, state: BotState, *, count: bool = True) -> Verdict:
    """Decide whether an update is a new message meant for the bot, from an allowed user,
    within the rate limit (`count`: spend one of the sender's messages).

    Runs before anything is stored: edited messages, channel posts, service messages,
    other bots and group chatter not addressed to the bot are ignored; refused users get
    one polite sentence.
    """
    if not isinstance(update, Update) or update.message is None:
        return IGNORE
    message = update.message
    if message.forum_topic_closed is not None:
        return topic_closed(message, state)
    if message.from_user is None or filters.StatusUpdate.ALL.check_update(update):
        return IGNORE
    # Other bots are ignored (no bot-to-bot loops), except a group's anonymous admin.
    if message.from_user.is_bot and not is_anonymous_admin(message):
        return IGNORE
    if not is_addressed(message, bot.username, bot.id):
        return IGNORE
    user, lang = message.from_user, message.from_user.language_code
    # The allowlist first: a stranger is told "not allowed", and spends no one's window.
    if not state.access.allows(user.id, message.chat.id):
        logger.info("refused user %s in chat %s", user.id, message.chat.id)
        return Verdict(False, t("not_allowed", lang))
    if count and not state.access.is_admin(user.id) and not state.limiter.allow(user.id):
        logger.debug("rate limit: dropping a message of user %s", user.id)
        if state.limiter.should_notify(user.id):
            logger.info("user %s is over the rate limit", user.id)
            return Verdict(False, t("rate_limited", lang))
        return IGNORE
    return ACCEPT


def topic_closed(message: Message, state: BotState) -> Verdict:
    """Admit a topic's closing in a chat the bot serves (its session ends); nothing is
    said and no one's rate limit is spent."""
    user = message.from_user
    if user is None or not state.access.allows(user.id, message.chat.id):
        return IGNORE
    return ACCEPT


async def gate(update: object, context: Context) -> None:
    """Stop every update `admission` refuses, telling the sender why where it should."""
    verdict = admission(update, context.bot, state_of(context), count=not ADMITTED.get())
    if verdict.accept:
        return
    if verdict.answer is not None and isinstance(update, Update) and update.message:
        await say(update.message, verdict.answer)
    raise ApplicationHandlerStop


# --- messages ------------------------------------------------------------------------------


async def on_text(update: Update, context: Context) -> None:
    """A text (or a caption): one turn of the conversation, "typing..." while it runs.

    The reply goes through the outbox: stored (with the turn's reply, in one
    transaction), then sent until Telegram accepts or finally refuses it.
    """
    message = message_of(update)
    state, lang = state_of(context), lang_of_message(message)
    text = turn_text(message, context.bot.username)
    refusal = state.service.check_input(text, lang)
    if refusal is not None:
        await say(message, refusal)
        return
    # A forwarded text is someone else's words: stored as such (meta `media: ["forward"]`),
    # so memory never takes a preference or a constraint of the user's from it.
    forwarded = MediaTurn(kinds=["forward"]) if message.forward_origin is not None else None
    async with state.order.hold(message.chat_id):
        await answer(update, context, text, forwarded)


async def on_media(update: Update, context: Context) -> None:
    """A voice note, audio file, photo or document, or an album of them: read into text
    (what cannot be read gets one sentence each), then answered like a text. Documents
    without a caption are stored and acknowledged: the next message asks about them.
    """
    message = message_of(update)
    state, lang, bot = state_of(context), lang_of_message(message), context.bot
    async with state.order.hold(message.chat_id):
        album, siblings = await gather_album(state, bot, update)
        repo = state.service.deps.delivery
        if await repo.stored_message_id(update.update_id) is not None:
            # An earlier run stored what it read (its worker died): acknowledge it if that
            # is what it did (the outbox sends it once), else answer it.
            ack = await repo.reply(update.update_id, ACK)
            if ack is not None:
                await state.outbox.deliver(bot, ack)
                return
            await answer(update, context, "", MediaTurn(siblings=siblings))
            return
        captioned = caption_of(album)
        caption = turn_text(captioned, bot.username) if captioned is not None else ""
        identity = identity_of(message)
        if await state.service.budget_refusal(identity) is not None:
            # Over the token budget: kept unread (no transcription, no description), and
            # the turn answers with when the budget resets.
            await answer(update, context, *unread(album, caption, siblings))
            return
        async with typing(message):  # transcribing, describing: seconds
            uploads, problems = await uploads_of(bot, album, state.settings, lang)
            reading = state.media.read(
                uploads, caption, lang, identity.owner_id, identity.sender_id
            )
            read = await until_stopped(state, bot, message, update.update_id, reading)
        if read is None:  # /stop while the files were read: nothing is kept
            await say(message, t("stopped", lang))
            for update_id in siblings:
                await repo.finish(update_id)
            return
        turn = read
        turn.siblings = siblings
        for n, sentence in enumerate(problems + turn.problems):
            await say_once(update, context, f"problem:{n}", sentence)
        if not turn.text:
            for update_id in siblings:  # nothing to answer: the album is done
                await repo.finish(update_id)
            return
        if turn.heard is not None:
            await say_once(update, context, "heard", t("heard", lang, text=turn.heard))
        if turn.answer:
            await answer(update, context, turn.text, turn)
            return
        delivery = delivery_of(update, message, state)
        said = group_turn_text(message, turn.text)
        # The acknowledgement is stored before the message, sent after it: a run again
        # after a death in between acknowledges, never answers, what was stored.
        text = acknowledgement(turn, lang)
        ack = await keep_aside(update, context, ACK, text)
        await state.service.remember(identity_of(message), said, delivery, turn, message.date)
        if ack is None:
            await say(message, text)
        else:
            await state.outbox.deliver(bot, ack)


async def keep_aside(update: Update, context: Context, kind: str, text: str) -> Reply | None:
    """Store a message beside the update's reply (`kind` names it) in the outbox, unless
    one is stored already; return the stored one (None: the outbox is unavailable)."""
    message, state = message_of(update), state_of(context)
    delivery = replace(delivery_of(update, message, state), fmt="plain")
    repo = state.service.deps.delivery
    try:
        await repo.add_reply(delivery, text, kind=kind)
        return await repo.reply(update.update_id, kind)
    except DB_ERRORS:
        logger.error("outbox unavailable: a message to %s goes unstored", update.update_id)
        return None


async def say_once(update: Update, context: Context, kind: str, text: str) -> None:
    """Send a message beside the update's reply through the outbox (see keep_aside), so
    that the update's job run again never sends it twice."""
    reply = await keep_aside(update, context, kind, text)
    if reply is None:
        await say(message_of(update), text)
    else:
        await state_of(context).outbox.deliver(context.bot, reply)


def delivery_of(update: Update, message: Message, state: BotState) -> Delivery:
    """Return where the reply to a message goes (a quote of it in groups)."""
    return Delivery(
        update.update_id,
        message.chat_id,
        message.message_thread_id if message.is_topic_message else None,
        None if is_private(message) else message.message_id,
        state.settings.telegram_reply_format,
    )


async def answer(
    update: Update, context: Context, text: str, media: MediaTurn | None = None
) -> None:
    """Run the turn on a message's text and deliver its reply (the chat's order held)."""
    message = message_of(update)
    state, lang = state_of(context), lang_of_message(message)
    delivery = delivery_of(update, message, state)
    limit = state.settings.max_input_chars
    said = said_text(message, text, context.bot.id, limit) if text else ""
    # The author's rights travel with the turn: its tools ask them (src/graph/rights.py).
    identity = await turn_identity(state, context.bot, message)
    waited = (datetime.now(UTC) - message.date).total_seconds()
    if waited > state.settings.turn_wait_limit:
        # Kept in the history for later turns, but too stale to answer now.
        if said:
            await state.service.remember(identity, said, delivery, media, message.date)
        await say(message, t("waited_too_long", lang, minutes=round(waited / 60)))
        return
    live = LiveReply(
        context.bot, message, update.update_id, state.settings.stream_replies, delivery.fmt
    )
    state.live.add(live)  # /stop finds it there
    try:
        live.start()
        async with typing(message):
            # Stamped with when Telegram says it was sent: it may have waited in the queue.
            result = await state.service.handle_message(
                identity,
                said,
                delivery=delivery,
                stream=live.stream,
                media=media,
                sent_at=message.date,
            )
    finally:
        state.live.remove(live)
        live_id = await live.finish()
    if not result.ok:
        delivery = replace(delivery, fmt="plain")
    repo = state.service.deps.delivery
    try:
        # Stored already with the reply (save_response), unless the turn failed.
        await repo.add_reply(delivery, result.reply)
        reply = await repo.reply(update.update_id)
    except DB_ERRORS:
        logger.error("outbox unavailable: the reply to %s goes unstored", update.update_id)
        await reply_text(message, result.reply, delivery.fmt, quote=not is_private(message))
        return
    if reply is None:
        return
    status = await state.outbox.deliver(context.bot, reply, live_id=live_id, edit_at=live.edit_at())
    if status == TOPIC_GONE:
        return  # the topic is deleted: nothing more can be said there
    if status == "rejected":
        # Telegram refused the reply itself (logged with its reason): say so.
        await say(message, t("internal_error", lang))
    # After the reply, not before it: a budget nearly spent is said once a period.
    try:
        warnings = await state.service.budget_warnings(identity)
    except DB_ERRORS:  # the reply is out: a warning missed is said after the next one
        logger.warning("budget warnings of %s unavailable", identity.owner_id, exc_info=True)
        warnings = []
    for sentence in warnings:
        await say(message, sentence)


async def on_topic_closed(update: Update, context: Context) -> None:
    """A topic was closed: its session ends now (compacted), not after the idle time."""
    message, state = message_of(update), state_of(context)
    async with state.order.hold(message.chat_id):
        await state.service.end_topic_session(identity_of(message))


async def on_other(update: Update, context: Context) -> None:
    """Stickers, videos, locations...: say what is understood."""
    message = message_of(update)
    await say(message, t("not_text", lang_of_message(message)))


# --- errors --------------------------------------------------------------------------------


async def on_error(update: object, context: Context) -> None:
    """Log every error with its traceback; tell the user, where there is one, that it failed."""
    error = context.error
    update_id = update.update_id if isinstance(update, Update) else None
    if isinstance(error, Forbidden):  # the user blocked the bot: nothing is broken
        logger.info("update %s: cannot write to the chat: %s", update_id, error)
        await _unreachable(update, context, error)
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


async def _unreachable(update: object, context: Context, error: Forbidden) -> None:
    """Mark a chat that refuses replies unreachable until it writes again: reminders and
    tasks' answers would bounce too. Its /mute stays as the user set it."""
    chat = update.effective_chat if isinstance(update, Update) else None
    if chat is None:
        return
    try:
        await state_of(context).chat_unreachable(chat.id, error.message)
    except Exception:
        logger.warning("could not mark chat %s unreachable", chat.id, exc_info=True)


def register(app: Application[Any, Any, Any, Any, Any, Any]) -> None:
    """Add the gate, the commands, the message handlers and the error handler."""
    app.add_handler(TypeHandler(Update, gate), group=-1)
    for name, callback in COMMANDS.items():
        app.add_handler(CommandHandler(name, callback))
    app.add_handler(MessageHandler(filters.COMMAND, cmd_unknown))
    app.add_handler(MessageHandler(filters.StatusUpdate.FORUM_TOPIC_CLOSED, on_topic_closed))
    app.add_handler(MessageHandler(MEDIA, on_media))
    app.add_handler(MessageHandler(filters.TEXT | filters.CAPTION, on_text))
    app.add_handler(MessageHandler(~filters.StatusUpdate.ALL, on_other))
    app.add_error_handler(on_error)
