"""A reply carries what it answers: the labels put before the user's text."""

from __future__ import annotations

import pytest
from telegram import Bot, Message, Update

from src.bot.replies import QUOTE_CHARS, REPLIED_CHARS, reply_context, said_text
from tests.fakes.bot_api_server import FakeBotAPI
from tests.unit.test_bot_chats import BOT_ID, BOT_NAME, TOKEN, NoNetwork

GROUP = {"chat_type": "supergroup", "chat_id": -100_777}


@pytest.fixture
def factory() -> FakeBotAPI:
    """Build updates with the fake server's helpers, without starting it."""
    return FakeBotAPI(TOKEN, username=BOT_NAME, bot_id=BOT_ID)


def last_message(factory: FakeBotAPI) -> Message:
    update = Update.de_json(factory.updates[-1], Bot(TOKEN, request=NoNetwork()))
    assert update is not None and update.message is not None
    return update.message


def test_no_reply_no_labels(factory: FakeBotAPI) -> None:
    factory.push_text(1, "hello", first_name="Ann", **GROUP)
    message = last_message(factory)
    assert reply_context(message, BOT_ID) == ""
    assert said_text(message, "hello", BOT_ID, 16_000) == "Ann: hello"


def test_a_reply_names_its_author_and_the_quote(factory: FakeBotAPI) -> None:
    factory.push_text(2, "Line one.\nLine two.", first_name="Bob", **GROUP)
    replied = factory.updates[-1]["message"]["message_id"]
    factory.push_text(1, "why?", first_name="Ann", reply_to=replied, quote="Line two.", **GROUP)
    message = last_message(factory)
    assert said_text(message, "why?", BOT_ID, 16_000) == (
        'Ann: [In reply to Bob: "Line one. Line two."]\n[Quoting: "Line two."]\nwhy?'
    )
    # Over the input limit, the question goes alone rather than being refused.
    assert said_text(message, "why?", BOT_ID, 30) == "Ann: why?"


def test_long_texts_are_cut_and_media_is_named(factory: FakeBotAPI) -> None:
    long = "word " * 1000
    factory.push_text(2, long, first_name="Bob")
    replied = factory.updates[-1]["message"]["message_id"]
    factory.push_text(2, "and?", reply_to=replied, quote=long[:2000])
    context = reply_context(last_message(factory), BOT_ID)
    reply, quote = context.split("\n")
    assert len(reply) < REPLIED_CHARS + 30 and len(quote) < QUOTE_CHARS + 20
    factory.push_photo(2)
    photo = factory.updates[-1]["message"]["message_id"]
    factory.push_text(2, "what is it?", reply_to=photo)
    assert reply_context(last_message(factory), BOT_ID) == "[In reply to Test: a photo]"


def test_a_reply_to_the_bot_and_a_forum_topic(factory: FakeBotAPI) -> None:
    factory.push_text(1, "again?", reply_to_bot=True)
    assert reply_context(last_message(factory), BOT_ID) == (
        '[In reply to your message: "previous bot message"]'
    )
    # A topic's messages "reply" to its first message: that is no reply.
    factory.push_text(1, "in a topic", **GROUP)
    update = factory.updates[-1]
    update["message"]["reply_to_message"] = {
        "message_id": 1,
        "date": 0,
        "chat": update["message"]["chat"],
        "forum_topic_created": {"name": "Topic", "icon_color": 0},
    }
    update["message"]["is_topic_message"] = True
    assert reply_context(last_message(factory), BOT_ID) == ""
