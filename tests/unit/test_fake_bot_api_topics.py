"""The fake Bot API's topics answer as Telegram does, through a real PTB Bot."""

from __future__ import annotations

import pytest
import telegram
from telegram.error import BadRequest

from tests.fakes.bot_api_server import FakeBotAPI

TOKEN = "123456:TEST-TOKEN"
USER = 7
GROUP = -100_710
FORUM = -100_711


def make_bot(tg: FakeBotAPI) -> telegram.Bot:
    return telegram.Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url)


async def test_a_thread_id_is_refused_where_the_chat_has_no_topics(tg: FakeBotAPI) -> None:
    tg.push_text(USER, "hi", chat_id=GROUP, chat_type="supergroup")
    async with make_bot(tg) as bot:
        for chat in (GROUP, USER):  # an ordinary group; a private chat without topic mode
            with pytest.raises(BadRequest, match="(?i)thread not found"):
                await bot.send_message(chat, "x", message_thread_id=5)
        with pytest.raises(BadRequest, match="(?i)thread not found"):
            await bot.send_message_draft(USER, 1, "x", message_thread_id=5)
        with pytest.raises(BadRequest, match="(?i)not a forum"):
            await bot.create_forum_topic(USER, "Trip")
    assert tg.sent == [] and tg.drafts == []


async def test_a_forum_topic_carries_its_messages_both_ways(tg: FakeBotAPI) -> None:
    tg.open_forum(FORUM)
    thread = tg.create_topic(FORUM, "Plans")
    tg.push_text(USER, "in the topic", chat_id=FORUM, chat_type="supergroup", topic=thread)
    with pytest.raises(ValueError):
        tg.push_text(USER, "nowhere", chat_id=FORUM, chat_type="supergroup", topic=thread + 99)
    async with make_bot(tg) as bot:
        [update] = await bot.get_updates()
        message = update.message
        assert message is not None and message.chat.is_forum
        assert message.is_topic_message and message.message_thread_id == thread
        assert message.reply_to_message is not None
        assert message.reply_to_message.forum_topic_created is not None
        sent = await bot.send_message(FORUM, "answer", message_thread_id=thread)
        assert sent.message_thread_id == thread and sent.is_topic_message
        with pytest.raises(BadRequest, match="(?i)thread not found"):
            await bot.send_message(FORUM, "x", message_thread_id=thread + 99)
        with pytest.raises(BadRequest, match="(?i)not enough rights"):
            await bot.create_forum_topic(FORUM, "Bot's")
        tg.push_topic_event(USER, FORUM, thread, "forum_topic_closed")
        with pytest.raises(BadRequest, match="(?i)topic_closed"):
            await bot.send_message(FORUM, "x", message_thread_id=thread)


async def test_private_topics_need_the_bots_topic_mode(tg: FakeBotAPI) -> None:
    tg.private_topics = True
    async with make_bot(tg) as bot:
        assert (await bot.get_me()).has_topics_enabled
        topic = await bot.create_forum_topic(USER, "Trip")
        assert tg.topic(USER, topic.message_thread_id) == {"name": "Trip", "closed": False}
        await bot.send_message_draft(USER, 1, "x", message_thread_id=topic.message_thread_id)
        tg.push_text(USER, "hello", topic=topic.message_thread_id)
        [update] = await bot.get_updates()
        assert update.message is not None and update.message.is_topic_message
        assert update.message.reply_to_message is None  # no service message in private
    assert tg.drafts[-1]["params"]["message_thread_id"] == topic.message_thread_id


async def test_a_deleted_topic_sends_no_update_and_refuses_what_is_sent_into_it(
    tg: FakeBotAPI,
) -> None:
    tg.open_forum(FORUM)
    thread = tg.create_topic(FORUM, "Plans")
    async with make_bot(tg) as bot:
        await bot.send_message(FORUM, "before", message_thread_id=thread)
        tg.delete_topic(FORUM, thread)
        assert await bot.get_updates() == ()  # Telegram tells bots nothing
        with pytest.raises(BadRequest, match="^Message thread not found$"):
            await bot.send_message(FORUM, "after", message_thread_id=thread)
    with pytest.raises(ValueError):
        tg.delete_topic(FORUM, thread)
