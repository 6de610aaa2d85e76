"""What a Telegram user meets on day one (issue 34, items 11 to 13): voice notes any
endpoint takes, replies that carry the message they answer, screenshots sent as files,
texts in the user's language and command menus that fit the chat.

The real Application against the fake Bot API, the fake model and real PostgreSQL.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from src.bot.replies import REPLIED_CHARS
from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL, stored
from tests.fakes.audio import fake_speech
from tests.fakes.bot_api_server import FakeBotAPI
from tests.media_files import image_bytes

ANN, BEN, OLES = 3401, 3402, 3403
GROUP = -100_340_000


async def test_users_of_languages_other_than_russian_get_english(
    start_bot: Any, tg: FakeBotAPI
) -> None:
    await start_bot()
    for n, code in enumerate(("uk", "be", "kk", "de")):
        tg.push_text(OLES + n, "/help", language_code=code)
        [answer] = await tg.await_messages(OLES + n, 1)
        assert answer["text"] == t("help", "en"), code
    tg.push_text(ANN, "/help", language_code="ru")
    assert (await tg.await_messages(ANN, 1))[0]["text"] == t("help", "ru")


async def test_command_menus_fit_the_chat_and_who_asks(start_bot: Any, tg: FakeBotAPI) -> None:
    tg.push_text(ANN, "hi", chat_type="supergroup", chat_id=GROUP)  # the fake knows the group
    tg.set_chat_admins(GROUP, BEN)
    await start_bot()
    private = tg.menu(ANN, ANN, "en")
    assert {"new", "forget", "mute", "erase", "export"} <= set(private)
    assert private["help"] == t("cmd_help", "en")
    assert tg.menu(ANN, ANN, "ru")["help"] == t("cmd_help", "ru")
    assert tg.menu(OLES, OLES, "uk")["help"] == t("cmd_help", "en")
    member = tg.menu(GROUP, ANN, "en")
    assert {"help", "memory", "stop", "usage"} <= set(member)
    # What only a group's administrators may do is not offered to its members.
    assert not {"new", "forget", "compress", "model", "export", "erase", "mute"} & set(member)
    admin = tg.menu(GROUP, BEN, "ru")
    assert {"new", "forget", "compress", "model", "export", "erase"} <= set(admin)
    assert admin["new"] == t("cmd_new", "ru") and "mute" not in admin


# --- voice notes (item 11) -----------------------------------------------------------------


async def test_a_voice_note_reaches_gpt_4o_mini_transcribe_as_ogg(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot(transcribe_model="gpt-4o-mini-transcribe")
    llm.script_for(CHAT_MODEL, "Noted: milk.")
    tg.push_voice(ANN, fake_speech("buy milk"), duration=2, language_code="en")
    heard, answer = await tg.await_messages(ANN, 2)
    assert heard["text"] == t("heard", "en", text="buy milk")
    assert answer["text"] == "Noted: milk."
    probe, request = llm.transcriptions  # the probe at start is refused before any work
    assert probe["file_name"] is None and probe["status"] == 400
    assert request["file_name"].endswith(".ogg") and request["status"] == 200


async def test_an_endpoint_without_transcription_turns_it_off_at_start(
    start_bot: Any, tg: FakeBotAPI, llm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    llm.transcriptions_supported = False  # a local server with chat and no speech-to-text
    with caplog.at_level(logging.WARNING, logger="src.services.media"):
        await start_bot()
    [line] = [r.getMessage() for r in caplog.records if "transcription is off" in r.getMessage()]
    assert "404" in line and "TRANSCRIBE_MODEL=whisper-1" in line
    tg.push_voice(ANN, fake_speech("hello"), language_code="en")
    [answer] = await tg.await_messages(ANN, 1)
    assert answer["text"] == t("voice_off", "en")  # not "try again": it never will work
    llm.script_for(CHAT_MODEL, "Got the caption.")
    tg.push_voice(ANN, fake_speech("hello"), caption="see the caption", language_code="en")
    assert [m["text"] for m in await tg.await_messages(ANN, 3)][1:] == [
        t("voice_off", "en"),
        "Got the caption.",
    ]


# --- replies and screenshots (item 12) -----------------------------------------------------


def user_turns(llm: Any) -> list[str]:
    """Return the last user message of every chat-model request."""
    turns = []
    for request in llm.requests_for(CHAT_MODEL):
        content = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
        if not isinstance(content, str):  # text and image parts
            content = "\n".join(p["text"] for p in content if p.get("type") == "text")
        turns.append(content)
    return turns


def system_text(llm: Any) -> str:
    """Return the system messages of the last chat-model request."""
    last = llm.requests_for(CHAT_MODEL)[-1]["messages"]
    return "\n".join(str(m["content"]) for m in last if m["role"] == "system")


async def test_a_reply_carries_the_message_it_answers_and_the_quote(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    group = {"chat_type": "supergroup", "chat_id": GROUP, "language_code": "en"}
    bob_says = "We should move the release to Friday. The tests are still red on Windows."
    tg.push_text(BEN, bob_says, first_name="Bob", **group)  # not for the bot: ignored
    bob_id = tg.updates[-1]["message"]["message_id"]
    llm.script_for(CHAT_MODEL, "Friday sounds safer.")
    tg.push_text(
        ANN,
        "@tgagent_test_bot what do you think?",
        first_name="Ann",
        reply_to=bob_id,
        quote="The tests are still red on Windows.",
        **group,
    )
    [answer] = await tg.await_messages(GROUP, 1)
    assert answer["text"] == "Friday sounds safer."
    expected = (
        f'Ann: [In reply to Bob: "{bob_says}"]\n'
        '[Quoting: "The tests are still red on Windows."]\n'
        "what do you think?"
    )
    [turn] = user_turns(llm)
    assert turn.endswith(expected)  # the user's message, after its time stamp
    assert bob_says not in system_text(llm)  # quoted material, never an instruction
    [user, _] = await stored(pool, GROUP)
    assert user[1].endswith(expected)


async def test_a_reply_to_a_long_message_or_the_bot_is_bounded_and_labelled(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot()
    llm.script_for(CHAT_MODEL, "First answer. " * 200, "About my first answer: yes.")
    tg.push_text(ANN, "tell me a lot", language_code="en")
    [first] = await tg.await_messages(ANN, 1)
    tg.push_text(ANN, "is that so?", language_code="en", reply_to=first["message_id"])
    await tg.await_messages(ANN, 2)
    turn = user_turns(llm)[-1]
    assert '[In reply to your message: "First answer. First answer.' in turn
    label = turn[turn.index("[In reply to") : turn.index("]\nis that so?")]
    assert len(label) <= REPLIED_CHARS + 40 < len(first["text"])


async def test_a_screenshot_sent_as_a_file_is_read_like_a_photo(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot(vision=True)
    llm.script_for(CHAT_MODEL, "A settings window with a red button.", "Press the red button.")
    screenshot = image_bytes(1800, 1200, "PNG")
    tg.push_document(ANN, "screenshot.png", screenshot, caption="what now?", language_code="en")
    [answer] = await tg.await_messages(ANN, 1)
    assert answer["text"] == "Press the red button."
    describe, turn = llm.requests_for(CHAT_MODEL)
    for request in (describe, turn):
        [image] = [
            part
            for message in request["messages"]
            if isinstance(message["content"], list)
            for part in message["content"]
            if part.get("type") == "image_url"
        ]
        assert image["image_url"]["url"].startswith("data:image/jpeg;base64,")
    [user, _] = await stored(pool, ANN)
    assert user[1].endswith("[Photo: A settings window with a red button.]\n\nwhat now?")


async def test_without_vision_an_uncaptioned_screenshot_gets_the_photo_sentence(
    start_bot: Any, tg: FakeBotAPI
) -> None:
    await start_bot()
    tg.push_document(ANN, "shot.webp", image_bytes(640, 480, "WEBP"), language_code="en")
    [answer] = await tg.await_messages(ANN, 1)
    assert answer["text"] == t("photo_unseen", "en")  # not "I can't read files like that"
