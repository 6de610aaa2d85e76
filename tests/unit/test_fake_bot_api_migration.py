"""The fake Bot API answers a group upgraded to a supergroup as Telegram does."""

from __future__ import annotations

import pytest
import telegram
from telegram.error import ChatMigrated

from tests.fakes.bot_api_server import FakeBotAPI

TOKEN = "123456:TEST-TOKEN"
USER = 7
OLD, NEW = -4_700, -1_004_700


def make_bot(tg: FakeBotAPI) -> telegram.Bot:
    return telegram.Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url)


async def test_calls_aimed_at_the_old_group_raise_chat_migrated(tg: FakeBotAPI) -> None:
    tg.push_text(USER, "hello", chat_id=OLD, chat_type="group")
    tg.migrate_group(OLD, NEW)
    async with make_bot(tg) as bot:
        with pytest.raises(ChatMigrated) as caught:
            await bot.send_message(OLD, "answer")
        assert caught.value.new_chat_id == NEW
        with pytest.raises(ChatMigrated):
            await bot.send_chat_action(OLD, "typing")
        sent = await bot.send_message(NEW, "answer")
    assert sent.chat.id == NEW and sent.chat.type == "supergroup"
    assert tg.texts_to(OLD) == [] and tg.texts_to(NEW) == ["answer"]


async def test_an_announced_upgrade_sends_a_service_message_in_each_chat(tg: FakeBotAPI) -> None:
    tg.migrate_group(OLD, NEW, user_id=USER, announce=True)
    async with make_bot(tg) as bot:
        gone, came = await bot.get_updates(timeout=5)
    assert gone.message is not None and came.message is not None
    assert (gone.message.chat.id, gone.message.migrate_to_chat_id) == (OLD, NEW)
    assert (came.message.chat.id, came.message.migrate_from_chat_id) == (NEW, OLD)
    assert came.message.chat.type == "supergroup"
