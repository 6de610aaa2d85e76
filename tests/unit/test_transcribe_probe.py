"""The start-up probe tells an endpoint that transcribes from one that has no speech-to-text,
through the real `openai` client against the fake server."""

from __future__ import annotations

import logging

import pytest

from src.media.transcribe import Transcriber, upload_file
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI


async def test_an_endpoint_that_transcribes_answers_the_probe_for_free(llm: FakeOpenAI) -> None:
    transcriber = Transcriber(make_settings(llm))
    assert await transcriber.probe() is None
    [probe] = llm.transcriptions  # refused before any work: nothing heard, nothing billed
    assert probe["file_name"] is None and probe["status"] == 400
    await transcriber.close()


async def test_an_endpoint_without_transcription_is_named(llm: FakeOpenAI) -> None:
    llm.transcriptions_supported = False
    transcriber = Transcriber(make_settings(llm))
    assert (await transcriber.probe() or "").startswith("404 ")
    await transcriber.close()


async def test_an_endpoint_that_cannot_be_reached_keeps_transcription_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = make_settings(transcribe_base_url="http://127.0.0.1:1/v1")
    transcriber = Transcriber(settings)
    with caplog.at_level(logging.WARNING, logger="src.media.transcribe"):
        assert await transcriber.probe() is None  # a voice note will tell
    assert "could not ask" in caplog.text
    await transcriber.close()


def test_ogg_audio_is_named_ogg() -> None:
    assert upload_file("voice/file_3.oga", b"x") == ("voice/file_3.ogg", b"x", "audio/ogg")
    assert upload_file("note.OPUS", b"x") == ("note.ogg", b"x", "audio/ogg")
    assert upload_file("song.mp3", b"x") == ("song.mp3", b"x", None)
