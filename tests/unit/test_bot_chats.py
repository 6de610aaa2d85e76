"""Private chats and groups: is a message for the bot, whose memory, which text."""

from __future__ import annotations

from typing import Any

import pytest
from telegram import Bot, Message, Update
from telegram.error import NetworkError
from telegram.request import BaseRequest

from src.bot.chats import (
    broken_invariant,
    command_target,
    group_turn_text,
    identity_of,
    is_addressed,
    turn_text,
)
from tests.fakes.bot_api_server import FakeBotAPI

TOKEN = "123456:TEST-TOKEN"
BOT_ID, BOT_NAME = 999, "tgagent_test_bot"


class NoNetwork(BaseRequest):
    """A request class that refuses every call: these tests never reach Telegram."""

    @property
    def read_timeout(self) -> float | None:
        return 1.0

    async def initialize(self) -> None:
        pass

    async def shutdown(self) -> None:
        pass

    async def do_request(self, url: str, method: str, *args: Any, **kwargs: Any) -> Any:
        raise NetworkError(f"no network in unit tests: {url}")


@pytest.fixture
def factory() -> FakeBotAPI:
    """Build updates with the fake server's helpers, without starting it."""
    return FakeBotAPI(TOKEN, username=BOT_NAME, bot_id=BOT_ID)


def last_message(factory: FakeBotAPI) -> Message:
    update = Update.de_json(factory.updates[-1], Bot(TOKEN, request=NoNetwork()))
    assert update is not None and update.message is not None
    return update.message


def addressed(factory: FakeBotAPI) -> bool:
    return is_addressed(last_message(factory), BOT_NAME, BOT_ID)


def test_private_messages_are_always_for_the_bot(factory: FakeBotAPI) -> None:
    factory.push_text(1, "hello")
    assert addressed(factory)
    factory.push_sticker(1)
    assert addressed(factory)


def test_group_needs_a_mention_a_reply_or_a_command(factory: FakeBotAPI) -> None:
    group = {"chat_type": "supergroup", "chat_id": -100}
    factory.push_text(1, "just chatting", **group)
    assert not addressed(factory)
    factory.push_text(1, f"@{BOT_NAME} what is 2+2?", **group)
    assert addressed(factory)
    factory.push_text(1, f"hey @{BOT_NAME.upper()}, help", **group)
    assert addressed(factory)
    factory.push_text(1, f"mail me at x@{BOT_NAME}.com", **group)
    assert not addressed(factory)
    factory.push_text(1, "@someone_else hi", **group)
    assert not addressed(factory)
    factory.push_text(1, "thanks", reply_to_bot=True, **group)
    assert addressed(factory)
    factory.push_text(1, "/help", **group)
    assert addressed(factory)
    factory.push_text(1, f"/help@{BOT_NAME}", **group)
    assert addressed(factory)
    factory.push_text(1, "/help@other_bot", **group)
    assert not addressed(factory)
    factory.push_photo(1, caption=f"@{BOT_NAME} look", **group)
    assert addressed(factory)
    factory.push_photo(1, caption="look", **group)
    assert not addressed(factory)


def test_text_mention_of_the_bot(factory: FakeBotAPI) -> None:
    factory.push_text(1, "Bot, hi", chat_type="group", chat_id=-5)
    data = factory.updates[-1]["message"]
    bot_user = {"id": BOT_ID, "is_bot": True, "first_name": "Bot"}
    data["entities"] = [{"type": "text_mention", "offset": 0, "length": 3, "user": bot_user}]
    assert addressed(factory)


def test_command_target(factory: FakeBotAPI) -> None:
    factory.push_text(1, "/start")
    assert command_target(last_message(factory)) == ""
    factory.push_text(1, f"/start@{BOT_NAME} x")
    assert command_target(last_message(factory)) == BOT_NAME
    factory.push_text(1, "say /start")
    assert command_target(last_message(factory)) is None


def test_identity_private_is_the_user_group_is_the_chat(factory: FakeBotAPI) -> None:
    factory.push_text(42, "hi", first_name="Ann", username="ann", language_code="en")
    identity = identity_of(last_message(factory))
    assert (identity.owner_id, identity.username, identity.first_name) == (42, "ann", "Ann")
    assert identity.language_code == "en"
    factory.push_text(42, "hi", chat_type="supergroup", chat_id=-1001, title="Team")
    identity = identity_of(last_message(factory))
    assert (identity.owner_id, identity.first_name, identity.language_code) == (-1001, "Team", "ru")


def test_turn_text_strips_the_mention_and_names_the_author(factory: FakeBotAPI) -> None:
    factory.push_text(7, f"@{BOT_NAME} what time is it?", chat_type="group", first_name="Ann")
    message = last_message(factory)
    text = turn_text(message, BOT_NAME)
    assert text == "what time is it?"
    assert group_turn_text(message, text) == "Ann: what time is it?"
    factory.push_text(7, f"hi @{BOT_NAME}")
    message = last_message(factory)
    assert turn_text(message, BOT_NAME) == f"hi @{BOT_NAME}"  # private: left as written
    assert group_turn_text(message, "x") == "x"
    factory.push_photo(7, caption="  a caption  ")
    assert turn_text(last_message(factory), BOT_NAME) == "a caption"


def test_the_updates_telegram_sends_keep_its_invariants(factory: FakeBotAPI) -> None:
    """No false alarm: private chats, groups, anonymous administrators, channel posts,
    edits, a group's upgrade told in both chats."""
    factory.push_text(1, "hello")
    factory.push_edited_text(1, "hello again")
    factory.push_text(2, "hi all", chat_type="group", chat_id=-5)
    anonymous = factory._message(3, chat_id=-1001, chat_type="supergroup")
    group_chat = dict(anonymous["chat"])
    factory.push_update({"message": anonymous | {"sender_chat": group_chat, "text": "as admin"}})
    factory.push_channel_post(-100777, "news")
    factory.migrate_group(-5, -1005, user_id=2, announce=True)
    bot = Bot(TOKEN, request=NoNetwork())
    updates = [Update.de_json(raw, bot) for raw in factory.updates]
    assert len(updates) == 7
    assert [broken_invariant(u) for u in updates] == [None] * 7
