"""The fake Bot API judges a text's entities, and an empty text, as Telegram does, through
a real PTB Bot."""

from __future__ import annotations

import pytest
import telegram
from telegram import MessageEntity
from telegram.error import BadRequest

from tests.fakes.bot_api_server import FakeBotAPI

TOKEN = "123456:TEST-TOKEN"
USER = 7


def make_bot(tg: FakeBotAPI) -> telegram.Bot:
    return telegram.Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url)


def bold(offset: int, length: int) -> MessageEntity:
    return MessageEntity(MessageEntity.BOLD, offset, length)


async def refusal(bot: telegram.Bot, text: str, *entities: MessageEntity) -> str:
    with pytest.raises(BadRequest) as caught:
        await bot.send_message(USER, text, entities=entities)
    return caught.value.message.lower()  # PTB capitalizes Telegram's description


async def test_entities_are_measured_in_utf16_units_inside_the_text(tg: FakeBotAPI) -> None:
    async with make_bot(tg) as bot:
        sent = await bot.send_message(USER, "😀 bold", entities=[bold(3, 4)])
        assert sent.entities == (bold(3, 4),)
        assert await refusal(bot, "😀 bold", bold(3, 5)) == (
            "entity beginning at utf-16 offset 3 ends after the end of the text at utf-16 offset 8"
        )
        assert await refusal(bot, "bold", bold(9, 1)) == (
            "entity begins after the end of the text at utf-16 offset 9"
        )
        assert "middle of a utf-16 symbol" in await refusal(bot, "😀 bold", bold(1, 3))
        assert "middle of a utf-16 symbol" in await refusal(bot, "😀 bold", bold(0, 1))
        assert await refusal(bot, "bold", bold(-1, 2)) == (
            "receive an entity with incorrect offset -1"
        )
    assert [m["text"] for m in tg.messages_to(USER)] == ["😀 bold"]


async def test_a_text_blank_once_trimmed_is_empty_whatever_its_entities(
    tg: FakeBotAPI,
) -> None:
    async with make_bot(tg) as bot:
        assert await refusal(bot, " \n ", bold(0, 3)) == "message text is empty"
        assert await refusal(bot, "") == "message text is empty"
        with pytest.raises(BadRequest, match="Message text is empty"):
            await bot.send_message(USER, "<pre><code></code></pre>", parse_mode="HTML")
    assert tg.messages_to(USER) == []


async def test_links_must_be_ones_telegram_opens(tg: FakeBotAPI) -> None:
    link = MessageEntity(MessageEntity.TEXT_LINK, 0, 4, url="http://localhost:8080")
    async with make_bot(tg) as bot:
        assert "wrong http url" in await refusal(bot, "site", link)
        good = MessageEntity(MessageEntity.TEXT_LINK, 0, 4, url="https://e.org/a_(b)")
        await bot.send_message(USER, "site", entities=[good])
        tg.reject_parse_mode = True  # every formatted text refused, as broken formatting is
        assert "messageentity" in await refusal(bot, "site", good)


async def test_an_edit_that_changes_only_the_entities_is_a_change(tg: FakeBotAPI) -> None:
    async with make_bot(tg) as bot:
        sent = await bot.send_message(USER, "same text")
        await bot.edit_message_text("same text", USER, sent.message_id, entities=[bold(0, 4)])
        with pytest.raises(BadRequest, match="not modified"):
            await bot.edit_message_text("same text", USER, sent.message_id, entities=[bold(0, 4)])
        with pytest.raises(BadRequest, match="ends after the end"):
            await bot.edit_message_text("same", USER, sent.message_id, entities=[bold(0, 9)])
    assert tg.bot_message(USER, sent.message_id)["entities"] == [  # type: ignore[index]
        {"type": "bold", "offset": 0, "length": 4}
    ]
