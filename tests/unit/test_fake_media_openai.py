"""The fake OpenAI server transcribes fake speech and takes image parts as OpenAI does, errors
included, through the real `openai` client and `ChatOpenAI` (raw HTTP where they would not
send the request)."""

from __future__ import annotations

import base64
import re
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

from tests.fakes.audio import fake_speech
from tests.fakes.images import make_image
from tests.fakes.openai_server import FakeOpenAI


def client(srv: FakeOpenAI) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=srv.base_url, api_key="x", max_retries=0)


async def transcribe(srv: FakeOpenAI, name: str, data: bytes, **kw: Any) -> Any:
    async with client(srv) as sdk:
        kw.setdefault("model", "whisper-1")
        return await sdk.audio.transcriptions.create(file=(name, data), **kw)


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def photo_message(url: str, text: str = "what is this?") -> HumanMessage:
    image = {"type": "image_url", "image_url": {"url": url, "detail": "low"}}
    return HumanMessage(content=[{"type": "text", "text": text}, image])


def chat(srv: FakeOpenAI, model: str = "gpt-4o-mini") -> ChatOpenAI:
    return ChatOpenAI(model=model, base_url=srv.base_url, api_key="x", max_retries=0)


# ----- transcriptions -------------------------------------------------------------------


async def test_transcribes_what_fake_speech_says(srv: FakeOpenAI) -> None:
    speech = fake_speech("Купи молока", "ogg")
    result = await transcribe(srv, "voice.oga", speech, language="ru", temperature=0.2)
    assert result.text == "Купи молока"
    assert srv.transcriptions == [
        {"model": "whisper-1", "file_name": "voice.oga", "size": len(speech), "language": "ru"}
        | {"response_format": "json", "prompt": None, "temperature": "0.2", "status": 200}
    ]


@pytest.mark.parametrize("fmt", ["ogg", "wav", "mp3", "flac", "m4a", "webm"])
async def test_every_supported_format_is_heard(srv: FakeOpenAI, fmt: str) -> None:
    assert (await transcribe(srv, f"a.{fmt}", fake_speech("hi", fmt))).text == "hi"


async def test_response_formats(srv: FakeOpenAI) -> None:
    speech = fake_speech("one two three")
    assert await transcribe(srv, "a.ogg", speech, response_format="text") == "one two three\n"
    verbose = await transcribe(srv, "a.ogg", speech, response_format="verbose_json")
    assert verbose.text == "one two three" and verbose.duration > 0
    assert verbose.segments and verbose.segments[0].text == " one two three"
    srt = await transcribe(srv, "a.ogg", speech, response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> ") and "one two three" in srt
    vtt = await transcribe(srv, "a.ogg", speech, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ")


async def test_silence_and_scripted_transcripts(srv: FakeOpenAI) -> None:
    silence = fake_speech("")[:40]  # a header and no marker
    assert (await transcribe(srv, "a.ogg", silence)).text == ""
    srv.script_transcript("scripted")
    assert (await transcribe(srv, "a.ogg", fake_speech("heard"))).text == "scripted"
    assert (await transcribe(srv, "a.ogg", fake_speech("heard"))).text == "heard"


async def test_unknown_model_is_404(srv: FakeOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await transcribe(srv, "a.ogg", fake_speech("x"), model="whisper-9")
    assert "The model `whisper-9` does not exist" in str(info.value)
    assert srv.transcriptions[-1]["status"] == 404


async def test_unsupported_extension_is_400(srv: FakeOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await transcribe(srv, "voice.opus", fake_speech("x"))
    assert "Invalid file format. Supported formats: ['flac', 'm4a', 'mp3'" in str(info.value)


async def test_gpt_transcribe_models_refuse_an_oga_name_as_openai_does(srv: FakeOpenAI) -> None:
    speech = fake_speech("hi", "ogg")
    with pytest.raises(openai.BadRequestError) as info:
        await transcribe(srv, "file_3.oga", speech, model="gpt-4o-mini-transcribe")
    assert info.value.body == {
        "message": "Unsupported file format oga",
        "type": "invalid_request_error",
        "param": "file",
        "code": "unsupported_value",
    }
    # The same bytes named .ogg are heard, and whisper-1 takes .oga.
    assert (await transcribe(srv, "a.ogg", speech, model="gpt-4o-mini-transcribe")).text == "hi"
    assert (await transcribe(srv, "a.oga", speech)).text == "hi"


async def test_without_transcription_the_route_is_missing(srv: FakeOpenAI) -> None:
    srv.transcriptions_supported = False
    with pytest.raises(openai.NotFoundError):
        await transcribe(srv, "a.ogg", fake_speech("hi"))
    assert srv.transcriptions == []


async def test_bytes_that_are_not_audio_are_400(srv: FakeOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await transcribe(srv, "voice.ogg", b"<html>not audio</html>")
    assert info.value.body["message"] == "Audio file might be corrupted or unsupported"


async def test_transcribe_models_take_only_json_and_text(srv: FakeOpenAI) -> None:
    speech = fake_speech("x")
    assert (await transcribe(srv, "a.ogg", speech, model="gpt-4o-transcribe")).text == "x"
    with pytest.raises(openai.BadRequestError, match="not compatible with model"):
        await transcribe(srv, "a.ogg", speech, model="gpt-4o-transcribe", response_format="srt")


async def test_bad_options_are_400(srv: FakeOpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="ISO-639-1"):
        await transcribe(srv, "a.ogg", fake_speech("x"), language="russian")
    with pytest.raises(openai.BadRequestError, match="Supported values are"):
        await transcribe(srv, "a.ogg", fake_speech("x"), response_format="xml")  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="temperature"):
        await transcribe(srv, "a.ogg", fake_speech("x"), temperature=3)


async def test_body_over_25_mb_is_413(srv: FakeOpenAI) -> None:
    huge = fake_speech("x") + bytes(25 * 1024 * 1024)
    with pytest.raises(openai.APIStatusError) as info:
        await transcribe(srv, "a.ogg", huge)
    assert info.value.status_code == 413
    assert "Maximum content size limit (26214400) exceeded" in str(info.value)


async def test_missing_model_or_file_is_400(srv: FakeOpenAI) -> None:
    url = srv.base_url + "/audio/transcriptions"
    async with httpx.AsyncClient() as http:
        no_model = await http.post(url, files={"file": ("a.ogg", fake_speech("x"))})
        no_file = await http.post(url, data={"model": "whisper-1"}, files={"x": ("x", b"x")})
    assert no_model.status_code == 400
    assert no_model.json()["error"]["message"] == "you must provide a model parameter"
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"


async def test_injected_failure_then_success(srv: FakeOpenAI) -> None:
    srv.fail_transcriptions_next(1, 503)
    with pytest.raises(openai.InternalServerError):
        await transcribe(srv, "a.ogg", fake_speech("x"))
    assert (await transcribe(srv, "a.ogg", fake_speech("back"))).text == "back"
    assert [t["status"] for t in srv.transcriptions] == [503, 200]


# ----- image parts ----------------------------------------------------------------------


async def test_vision_model_takes_an_image_and_records_it(srv: FakeOpenAI) -> None:
    png = make_image(120, 80, "png")
    answer = await chat(srv).ainvoke([photo_message(data_url(png))])
    assert answer.content == "ok: what is this?"
    assert srv.images_seen == [
        {"model": "gpt-4o-mini", "url": None, "mime_type": "image/png"}
        | {"width": 120, "height": 80, "size": len(png)}
    ]


async def test_http_image_is_taken_without_fetching(srv: FakeOpenAI) -> None:
    await chat(srv, "fake-vision").ainvoke([photo_message("https://example.com/cat.jpg")])
    assert srv.images_seen[0]["url"] == "https://example.com/cat.jpg"


async def test_corrupt_base64_is_refused(srv: FakeOpenAI) -> None:
    srv.script("meant for the next request")
    with pytest.raises(openai.BadRequestError, match="Invalid base64 image_url"):
        await chat(srv).ainvoke([photo_message("data:image/png;base64,!!not base64!!")])
    assert srv.images_seen == [] and srv.pending_replies() == 1


async def test_bytes_that_are_not_the_named_image_are_refused(srv: FakeOpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="Please make sure your image is valid"):
        await chat(srv).ainvoke([photo_message(data_url(b"not an image"))])
    with pytest.raises(openai.BadRequestError, match="Please make sure your image is valid"):
        await chat(srv).ainvoke([photo_message(data_url(make_image(kind="png"), "image/jpeg"))])
    with pytest.raises(openai.BadRequestError, match="following formats"):
        await chat(srv).ainvoke([photo_message(data_url(make_image(), "image/bmp"))])
    with pytest.raises(openai.BadRequestError, match="without the 'data:' prefix"):
        await chat(srv).ainvoke([photo_message("ftp://example.com/a.png")])


async def test_model_without_vision_is_refused(srv: FakeOpenAI) -> None:
    url = data_url(make_image(kind="jpeg"), "image/jpeg")
    with pytest.raises(openai.BadRequestError, match="image_url is only supported by certain"):
        await chat(srv, "fake-model").ainvoke([photo_message(url)])
    srv.vision_models = {"fake-model"}
    assert (await chat(srv, "fake-model").ainvoke([photo_message(url)])).content
    with pytest.raises(openai.BadRequestError, match="only supported by certain models"):
        await chat(srv, "gpt-4o-mini").ainvoke([photo_message(url)])


async def test_malformed_parts_are_refused(srv: FakeOpenAI) -> None:
    image = {"type": "image_url", "image_url": {"url": data_url(make_image(kind="png"))}}
    cases = [
        ({"role": "system", "content": [image]}, "only allowed for messages with role 'user'"),
        ({"role": "user", "content": []}, "empty array"),
        ({"role": "user", "content": [{"type": "video"}]}, "Invalid value: 'video'"),
        ({"role": "user", "content": [{"type": "text"}]}, "content[0].text"),
        ({"role": "user", "content": [{"type": "image_url"}]}, "content[0].image_url"),
        (
            {"role": "user", "content": [image | {"image_url": {"url": "x", "detail": "max"}}]},
            "'auto', 'low', and 'high'",
        ),
    ]
    async with client(srv) as sdk:
        for message, error in cases:
            with pytest.raises(openai.BadRequestError, match=re.escape(error)):
                await sdk.chat.completions.create(model="gpt-4o-mini", messages=[message])  # type: ignore[list-item]
    assert srv.images_seen == []
