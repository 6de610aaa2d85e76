"""The role of whoever wrote a message or pressed a button, decided once where the update
arrives; the turn carries it to the model's tools, and commands and buttons ask the same
table (src/graph/rights.py)."""

from __future__ import annotations

import logging
from dataclasses import replace

from telegram import Bot, CallbackQuery, Message
from telegram.constants import ChatType
from telegram.error import TelegramError

from src.bot.chats import identity_of, is_anonymous_admin, is_private
from src.bot.state import BotState
from src.graph.rights import Role
from src.services.turn_types import Identity

logger = logging.getLogger(__name__)


async def author_role(state: BotState, bot: Bot, message: Message) -> Role:
    """Return what the message's author may do in its chat: a private chat's user owns it;
    in a group, its administrators (one writing anonymously, as the group, too) are
    administrators, everyone else a plain member. Telegram is asked who administers the
    group (getChatMember, remembered for a minute: src/bot/access.py)."""
    if is_private(message):
        return Role.OWNER
    if is_anonymous_admin(message):
        return Role.ADMIN
    user = message.from_user
    if user is None or message.sender_chat is not None:
        return Role.MEMBER  # a channel or another chat writing in the group
    return await _group_role(state, bot, message.chat_id, user.id)


async def _group_role(state: BotState, bot: Bot, chat_id: int, user_id: int) -> Role:
    """Ask whether the user administers the group; when Telegram cannot be asked now (a
    network error, a 429), the turn goes on with a plain member's rights."""
    try:
        admin = await state.group_admins.is_admin(bot, chat_id, user_id)
    except TelegramError as exc:
        logger.warning("could not tell whether %s administers %s: %s", user_id, chat_id, exc)
        return Role.MEMBER
    return Role.ADMIN if admin else Role.MEMBER


async def presser_role(state: BotState, bot: Bot, query: CallbackQuery) -> Role | None:
    """Return what the user who pressed a button may do in the button's chat (None: the
    button is in someone else's private chat, or its message is gone)."""
    user, message = query.from_user, query.message
    if message is None:
        return None
    chat = message.chat
    if chat.type == ChatType.PRIVATE:
        return Role.OWNER if chat.id == user.id else None
    return await _group_role(state, bot, chat.id, user.id)


async def turn_identity(state: BotState, bot: Bot, message: Message) -> Identity:
    """Return whose memory the message's turn uses, with its author's role."""
    return replace(identity_of(message), role=await author_role(state, bot, message))
