"""The fake Bot API keeps command menus per scope and language as Telegram does, through a
real PTB Bot."""

from __future__ import annotations

import re

import pytest
import telegram
from telegram import (
    BotCommandScopeAllChatAdministrators,
    BotCommandScopeAllGroupChats,
    BotCommandScopeAllPrivateChats,
    BotCommandScopeChat,
    BotCommandScopeChatAdministrators,
    BotCommandScopeChatMember,
)
from telegram.error import BadRequest

from tests.fakes.bot_api_server import FakeBotAPI

TOKEN = "123456:TEST-TOKEN"
GROUP = -100_600
ANN, BEN = 61, 62


def make_bot(tg: FakeBotAPI) -> telegram.Bot:
    return telegram.Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url)


async def test_menus_are_kept_per_scope_and_language_and_resolved_as_telegram_does(
    tg: FakeBotAPI,
) -> None:
    tg.push_text(ANN, "hi", chat_type="supergroup", chat_id=GROUP)
    tg.set_chat_admins(GROUP, BEN)
    async with make_bot(tg) as bot:
        await bot.set_my_commands([("help", "Help"), ("mute", "Mute")])
        await bot.set_my_commands([("help", "Help")], scope=BotCommandScopeAllGroupChats())
        admins = BotCommandScopeAllChatAdministrators()
        await bot.set_my_commands([("help", "Help"), ("new", "New")], scope=admins)
        await bot.set_my_commands([("new", "Новый")], scope=admins, language_code="ru")
        # getMyCommands answers the exact list, without falling back.
        assert await bot.get_my_commands(scope=BotCommandScopeAllPrivateChats()) == ()
        assert [c.command for c in await bot.get_my_commands(scope=admins)] == ["help", "new"]
    assert tg.menu(ANN, ANN) == {"help": "Help", "mute": "Mute"}  # the default scope
    assert tg.menu(GROUP, ANN, "ru") == {"help": "Help"}  # a member: the group scope
    assert tg.menu(GROUP, BEN, "en") == {"help": "Help", "new": "New"}
    assert tg.menu(GROUP, BEN, "ru-RU") == {"new": "Новый"}  # the language's list first
    async with make_bot(tg) as bot:
        await bot.set_my_commands([], scope=admins, language_code="ru")  # deletes it
        await bot.delete_my_commands(scope=admins)
    assert tg.menu(GROUP, BEN, "ru") == {"help": "Help"}


@pytest.mark.parametrize(
    ("commands", "kwargs", "error"),
    [
        ([("Help", "Help")], {}, "BOT_COMMAND_INVALID"),
        ([("help", "")], {}, "command description must be non-empty"),
        ([("h" * 33, "Help")], {}, "command length must not exceed 32"),
        ([("help", "Help")], {"language_code": "english"}, "invalid language code specified"),
        ([("help", "Help")], {"scope": BotCommandScopeChat(-42)}, "chat not found"),
        (
            [("help", "Help")],
            {"scope": BotCommandScopeChatAdministrators(ANN)},
            "can't use specified scope in private chats",
        ),
        (
            [("help", "Help")],
            {"scope": BotCommandScopeChatMember(GROUP, 0)},
            "can't parse BotCommandScope: Invalid user_id specified",
        ),
    ],
)
async def test_malformed_menus_are_refused_as_telegram_does(
    tg: FakeBotAPI, commands: list[tuple[str, str]], kwargs: dict[str, object], error: str
) -> None:
    tg.push_text(ANN, "hi")
    tg.push_text(ANN, "hi", chat_type="supergroup", chat_id=GROUP)
    async with make_bot(tg) as bot:
        with pytest.raises(BadRequest, match="(?i)" + re.escape(error)):
            await bot.set_my_commands(commands, **kwargs)  # type: ignore[arg-type]
    assert tg.commands == {}


async def test_an_unknown_scope_type_is_refused(tg: FakeBotAPI) -> None:
    async with make_bot(tg) as bot:
        with pytest.raises(BadRequest, match="(?i)unsupported type specified"):
            await bot.do_api_request(
                "setMyCommands",
                {"commands": [{"command": "help", "description": "Help"}], "scope": {"type": "x"}},
            )
