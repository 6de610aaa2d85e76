"""The command menus Telegram shows: one for private chats, one for a group's members and
one for its administrators, in English and in Russian."""

from __future__ import annotations

import logging

from telegram import (
    Bot,
    BotCommand,
    BotCommandScope,
    BotCommandScopeAllChatAdministrators,
    BotCommandScopeAllGroupChats,
    BotCommandScopeAllPrivateChats,
)
from telegram.error import TelegramError

from src.services.texts import t

logger = logging.getLogger(__name__)

# The menu without a language code is English; Russian speakers get the Russian one.
MENU_LANGUAGES = {"": "en", "ru": "ru"}
# In a private chat everything is the user's own; in a group the commands that wipe,
# rewrite, export or switch the group's memory or model are its administrators' only
# (src/bot/commands.py: may_change_memory), so members are not offered them.
PRIVATE = (
    "help", "new", "forget", "mute", "memory", "compress", "stop", "model", "usage",
    "tasks", "tz", "tools", "export", "erase",
)  # fmt: skip
GROUP_MEMBERS = ("help", "memory", "stop", "usage", "tools")
GROUP_ADMINS = (
    "help", "new", "forget", "memory", "compress", "stop", "model", "usage", "tasks", "tz",
    "tools", "export", "erase",
)  # fmt: skip
MENUS: tuple[tuple[BotCommandScope, tuple[str, ...]], ...] = (
    (BotCommandScopeAllPrivateChats(), PRIVATE),
    (BotCommandScopeAllGroupChats(), GROUP_MEMBERS),
    (BotCommandScopeAllChatAdministrators(), GROUP_ADMINS),
)


async def publish_menus(bot: Bot) -> None:
    """Set every menu; a refusal is logged and the bot goes on without menus."""
    for scope, names in MENUS:
        for code, lang in MENU_LANGUAGES.items():
            commands = [BotCommand(name, t(f"cmd_{name}", lang)) for name in names]
            try:
                await bot.set_my_commands(commands, scope=scope, language_code=code or None)
            except TelegramError as exc:
                logger.warning("could not set the %s menu (%s): %s", scope.type, code or "-", exc)
                return
