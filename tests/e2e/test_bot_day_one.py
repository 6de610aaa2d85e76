"""What a Telegram user meets on day one (issue 34, items 11 to 13): voice notes any
endpoint takes, replies that carry the message they answer, screenshots sent as files,
texts in the user's language and command menus that fit the chat.

The real Application against the fake Bot API, the fake model and real PostgreSQL.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL
from tests.fakes.audio import fake_speech
from tests.fakes.bot_api_server import FakeBotAPI

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
