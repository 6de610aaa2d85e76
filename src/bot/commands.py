"""The bot's commands: /start, /help, /new, /forget, /mute, /compress, /stop, /model,
/usage, and unknown ones (/export and /erase: src/bot/data_commands.py; /memory:
src/bot/memory_commands.py)."""

from __future__ import annotations

import logging

from telegram import (
    Bot,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    Update,
    User,
)
from telegram.constants import ChatType
from telegram.error import BadRequest, TelegramError
from telegram.ext import ApplicationHandlerStop, ContextTypes

from src.bot.chats import identity_of, is_anonymous_admin, is_private, topic_of
from src.bot.rights import author_role, presser_role, turn_identity
from src.bot.sending import reply_text, typing
from src.bot.state import BotState, state_of
from src.graph.rights import Action, may
from src.graph.timestamps import own_zone
from src.services.agent_service import Identity
from src.services.texts import t
from src.services.tools_view import tools_text
from src.services.usage_report import UsageReports, render_owner, render_top

logger = logging.getLogger(__name__)

Context = ContextTypes.DEFAULT_TYPE
# The /model buttons' data: "model:<position in the offered models>".
MODEL_DATA = "model:"
ALL_WORDS = ("all", "все", "всё")


def message_of(update: Update) -> Message:
    """Return the update's new message (the gate lets nothing else through)."""
    message = update.message
    if message is None:
        raise ApplicationHandlerStop
    return message


def lang_of_message(message: Message) -> str | None:
    """Return the author's Telegram language code."""
    return message.from_user.language_code if message.from_user else None


async def say(message: Message, text: str) -> None:
    """Send one of the bot's own texts (plain), quoting the message in groups."""
    await reply_text(message, text, quote=not is_private(message))


async def may_change_chat(
    message: Message, context: Context, action: Action = Action.CHANGE_CHAT
) -> bool:
    """Tell whether the author may do `action` in this chat (src/graph/rights.py: anyone
    in a private chat; in a group, its administrators only, an anonymous one writing as
    the group; the model's tools ask the same table)."""
    role = await author_role(state_of(context), context.bot, message)
    return may(role, action)


async def may_change_memory(
    message: Message, context: Context, action: Action = Action.CHANGE_CHAT
) -> bool:
    """Tell whether the author may do `action` in this chat; if not, say so (see
    `may_change_chat`)."""
    if await may_change_chat(message, context, action):
        return True
    user = message.from_user
    logger.info("user %s may not %s in chat %s", user and user.id, action.value, message.chat_id)
    await say(message, t("group_admins_only", lang_of_message(message)))
    return False


async def cmd_start(update: Update, context: Context) -> None:
    """/start: greet; the context is untouched."""
    message = message_of(update)
    name = message.from_user.first_name if message.from_user else ""
    await say(message, t("greeting", lang_of_message(message), name=name))


async def cmd_help(update: Update, context: Context) -> None:
    """/help: what the bot does and every command."""
    message = message_of(update)
    await say(message, t("help", lang_of_message(message)))


async def cmd_new(update: Update, context: Context) -> None:
    """/new: wipe the conversation and start over (seed 004); `/new topic NAME` in a
    private chat: a new topic, a conversation of its own."""
    message, state = message_of(update), state_of(context)
    if context.args and context.args[0].lower() == "topic" and is_private(message):
        await new_topic(message, context, " ".join(context.args[1:]))
        return
    async with state.order.hold(message.chat_id):
        if not await may_change_memory(message, context):
            return
        async with typing(message):
            # Compacting the old session may take a model call: "typing..." meanwhile.
            await state.service.new_conversation(identity_of(message))
            await say(message, t("new", lang_of_message(message)))


async def new_topic(message: Message, context: Context, name: str) -> None:
    """Create a topic in a private chat with topics (createForumTopic) and greet in it."""
    lang = lang_of_message(message)
    try:
        topic = await context.bot.create_forum_topic(message.chat_id, name.strip()[:128] or "…")
    except BadRequest as exc:
        logger.info("no topic in chat %s: %s", message.chat_id, exc.message)
        await say(message, t("new_topic_failed", lang))
        return
    text = t("new_topic", lang, name=topic.name)
    await context.bot.send_message(message.chat_id, text, message_thread_id=topic.message_thread_id)


async def cmd_forget(update: Update, context: Context) -> None:
    """/forget: a clean context from now on, history kept, reminders off (seed 000)."""
    message, state = message_of(update), state_of(context)
    async with state.order.hold(message.chat_id):
        if not await may_change_memory(message, context):
            return
        await state.service.forget(identity_of(message))
        await say(message, t("forget", lang_of_message(message)))


async def cmd_mute(update: Update, context: Context) -> None:
    """/mute: turn reminders off or back on, and say which; the context is untouched."""
    message, state = message_of(update), state_of(context)
    async with state.order.hold(message.chat_id):
        if not is_private(message):  # groups are never reminded: there is nothing to switch
            await say(message, t("mute_group", lang_of_message(message)))
            return
        enabled = await state.service.toggle_mute(identity_of(message))
        await say(message, t("unmuted" if enabled else "muted", lang_of_message(message)))


async def cmd_compress(update: Update, context: Context) -> None:
    """/compress [focus]: ask the model to compress the conversation's older part."""
    message, state = message_of(update), state_of(context)
    focus = " ".join(context.args or []).strip() or None
    async with state.order.hold(message.chat_id):
        if not await may_change_memory(message, context, Action.COMPRESS):
            return
        async with typing(message):
            identity = await turn_identity(state, context.bot, message)
            result = await state.service.compress(identity, focus)
            await say(message, result.reply)


async def cmd_stop(update: Update, context: Context) -> None:
    """/stop: end the chat's running turn (see src/bot/stops.py), or say there is none.

    The receiver runs it as /stop arrives (src/bot/receive.py): queued behind the turn,
    it would come too late. Here it serves an update that reached the handlers anyway.
    """
    message, state = message_of(update), state_of(context)
    lang = lang_of_message(message)
    result = await request_stop(
        state,
        context.bot,
        message.chat_id,
        message.from_user,
        is_anonymous_admin(message),
        topic=topic_of(message),
    )
    if result != "stopped":
        await say(
            message, t("stop_not_yours" if result == "not_yours" else "nothing_to_stop", lang)
        )


async def request_stop(
    state: BotState,
    bot: Bot,
    chat_id: int,
    user: User | None,
    admin: bool = False,
    turn: int | None = None,
    topic: int | None = None,
) -> str:
    """Stop a chat's running turn (`turn`: only that update's, as a Stop button asks;
    `topic`: only one answering in that topic, as /stop in a topic asks) for `user`:
    "stopped", "not_yours" or "none".

    In a group, the one who asked may stop it, and so may an administrator (asked of
    Telegram only when the one stopping did not ask).
    """
    if user is None:
        return "none"
    stops = state.stops
    if stops is None:  # this process does not listen (tests building handlers alone)
        return state.live.stop(chat_id, user.id, admin, turn, topic) or "none"
    result = await stops.request(chat_id, user.id, admin, turn, topic)
    if result == "not_yours" and await state.group_admins.is_admin(bot, chat_id, user.id):
        result = await stops.request(chat_id, user.id, admin=True, turn=turn, topic=topic)
    return result


async def cmd_model(update: Update, context: Context) -> None:
    """/model: the models on offer with a button each, the current one marked;
    /model <name or number>: answer with that one from the next message on."""
    message, state = message_of(update), state_of(context)
    lang, identity = lang_of_message(message), identity_of(message)
    choices = state.settings.choices
    async with state.order.hold(message.chat_id):
        if context.args:
            if not await may_change_memory(message, context):
                return
            name = _pick(choices, " ".join(context.args))
            if name is None:
                await say(message, t("model_unknown", lang, choices=", ".join(choices)))
                return
            await state.service.set_model(identity, name)
            await say(message, t("model_set", lang, model=name))
            return
        current = await state.service.current_model(identity)
        if len(choices) == 1:
            await say(message, t("model_only", lang, model=current))
            return
        await message.reply_text(
            t("model_list", lang, model=current),
            reply_markup=model_buttons(choices, current),
            do_quote=not is_private(message),
        )


def _pick(choices: list[str], wanted: str) -> str | None:
    """Return the offered model named `wanted` (any case) or numbered so (from 1)."""
    wanted = wanted.strip()
    if wanted.isdigit() and 1 <= int(wanted) <= len(choices):
        return choices[int(wanted) - 1]
    return next((c for c in choices if c.lower() == wanted.lower()), None)


def model_buttons(choices: list[str], current: str) -> InlineKeyboardMarkup:
    """One button per offered model, the current one marked."""
    rows = [
        [
            InlineKeyboardButton(
                ("✓ " if name == current else "") + name, callback_data=f"{MODEL_DATA}{i}"
            )
        ]
        for i, name in enumerate(choices)
    ]
    return InlineKeyboardMarkup(rows)


async def pressing_owner(
    state: BotState, bot: Bot, query: CallbackQuery, action: Action | None = Action.CHANGE_CHAT
) -> Identity | None:
    """Return whose memory a button press acts on: the user's in a private chat, the
    group's in a group; None when the presser may not do `action` there (in a group, a
    plain member: src/graph/rights.py) or presses in someone else's private chat."""
    user, message = query.from_user, query.message
    lang = user.language_code
    role = await presser_role(state, bot, query) if message is not None else None
    if message is None or role is None:
        return None
    if action is not None and not may(role, action):
        return None
    chat = message.chat
    if chat.type == ChatType.PRIVATE:
        return Identity(user.id, user.username, user.first_name, lang, role=role)
    return Identity(chat.id, chat.username, chat.title, lang, role=role)


async def model_pressed(state: BotState, bot: Bot, query: CallbackQuery) -> None:
    """A press of a /model button: switch the chat's model (in a group, an administrator
    only) and mark the new choice."""
    user, message = query.from_user, query.message
    lang, choices = user.language_code, state.settings.choices
    index = (query.data or "").removeprefix(MODEL_DATA)
    if message is None or not index.isdigit() or int(index) >= len(choices):
        await query.answer()
        return
    identity = await pressing_owner(state, bot, query)
    if identity is None:
        await query.answer(t("group_admins_only", lang))
        return
    name = choices[int(index)]
    await state.service.set_model(identity, name)
    await query.answer(t("model_set", lang, model=name))
    try:
        await query.edit_message_reply_markup(model_buttons(choices, name))
    except TelegramError as exc:  # "message is not modified": pressed twice
        logger.debug("could not mark the model chosen: %s", exc)


async def cmd_usage(update: Update, context: Context) -> None:
    """/usage: the chat's tokens and estimated cost (last answer, today, this month);
    /usage all: the top spenders, for the bot's admins (ADMIN_USER_IDS)."""
    message, state = message_of(update), state_of(context)
    lang, usage = lang_of_message(message), state.service.usage
    if usage is None:  # a service built without accounting (tests building handlers alone)
        return
    reports, settings = UsageReports(usage), state.settings
    if context.args and context.args[0].lower() in ALL_WORDS:
        user = message.from_user
        if user is None or not state.access.is_admin(user.id):
            await say(message, t("usage_admins_only", lang))
            return
        await say(message, render_top(await reports.top_periods(), lang))
        return
    owner_id = identity_of(message).owner_id
    zone = own_zone(await state.service.deps.users.get(owner_id))
    owner = await reports.owner(owner_id, zone)
    daily, monthly = settings.user_daily_tokens, settings.user_monthly_tokens
    usd = settings.user_daily_usd, settings.user_monthly_usd
    await say(message, render_owner(owner, lang, daily, monthly, *usd))


async def cmd_tools(update: Update, context: Context) -> None:
    """/tools: the MCP tools the author may use here (as the model is offered them)."""
    message, state = message_of(update), state_of(context)
    identity = await turn_identity(state, context.bot, message)
    await say(message, tools_text(state.service.deps.mcp, identity, lang_of_message(message)))


async def cmd_unknown(update: Update, context: Context) -> None:
    """Any other /command: the help line."""
    message = message_of(update)
    await say(message, t("unknown_command", lang_of_message(message)))


COMMANDS = {
    "start": cmd_start,
    "help": cmd_help,
    "new": cmd_new,
    "forget": cmd_forget,
    "mute": cmd_mute,
    "compress": cmd_compress,
    "stop": cmd_stop,
    "model": cmd_model,
    "usage": cmd_usage,
    "tools": cmd_tools,
}
