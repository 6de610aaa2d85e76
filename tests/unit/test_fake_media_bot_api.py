"""The fake Bot API keeps the files messages carry and serves them as Telegram does, errors
included, through a real PTB Bot (and raw HTTP where PTB would not send the request)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
import telegram
from telegram import Message
from telegram.error import BadRequest, NetworkError

from tests.fakes.audio import fake_speech
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.images import image_info, make_image

TOKEN = "123456:TEST-TOKEN"
USER = 7


def make_bot(tg: FakeBotAPI) -> telegram.Bot:
    return telegram.Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url)


async def messages(bot: telegram.Bot, count: int) -> list[Message]:
    """Return the next `count` pushed messages, through getUpdates."""
    updates = await bot.get_updates(timeout=5)
    assert len(updates) == count
    await bot.get_updates(offset=updates[-1].update_id + 1, timeout=0)
    return [u.message for u in updates if u.message is not None]


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_voice_note_is_served_with_its_bytes(tg: FakeBotAPI) -> None:
    audio = fake_speech("buy milk")
    tg.push_voice(USER, audio, duration=4, caption="/note @tgagent_test_bot")
    async with make_bot(tg) as bot:
        (msg,) = await messages(bot, 1)
        assert (
            msg.voice is not None
            and msg.voice.file_size == len(audio)
            and msg.voice.mime_type == "audio/ogg"
        )
        assert [e.type for e in msg.caption_entities] == ["bot_command", "mention"]
        file = await bot.get_file(msg.voice.file_id)
        assert file.file_path.endswith(".oga") and "/voice/file_" in file.file_path
        assert bytes(await file.download_as_bytearray()) == audio
    assert tg.downloads == [msg.voice.file_id]


async def test_photo_sizes_are_real_jpegs_with_the_original_last(tg: FakeBotAPI) -> None:
    image = make_image(1000, 600, "png")
    tg.push_photo(USER, caption="look", data=image)
    async with make_bot(tg) as bot:
        (msg,) = await messages(bot, 1)
        sizes = [(p.width, p.height) for p in msg.photo]
        assert sizes == [(90, 54), (320, 192), (800, 480), (1000, 600)]
        assert msg.caption == "look" and msg.media_group_id is None
        largest = await bot.get_file(msg.photo[-1].file_id)
        assert "/photos/file_" in largest.file_path
        assert bytes(await largest.download_as_bytearray()) == image
        small = await (await bot.get_file(msg.photo[0].file_id)).download_as_bytearray()
        assert image_info(bytes(small)) == ("jpeg", 90, 54)
    assert len({p.file_unique_id for p in msg.photo}) == 4


async def test_document_and_audio_get_paths_from_their_names(tg: FakeBotAPI) -> None:
    pdf = b"%PDF-1.4\n%fake\n"
    tg.push_document(USER, "report.pdf", data=pdf, caption="summarize")
    tg.push_audio(USER, fake_speech("la la", "mp3"), 200, caption=None)
    async with make_bot(tg) as bot:
        doc, song = await messages(bot, 2)
        assert doc.document.mime_type == "application/pdf" and doc.caption == "summarize"
        assert doc.document.file_name == "report.pdf" and doc.document.file_size == len(pdf)
        file = await bot.get_file(doc.document.file_id)
        assert "/documents/file_" in file.file_path and file.file_path.endswith(".pdf")
        assert bytes(await file.download_as_bytearray()) == pdf
        assert song.audio.file_name == "song.mp3" and song.audio.mime_type == "audio/mpeg"
        assert (await bot.get_file(song.audio.file_id)).file_path.endswith(".mp3")


async def test_placeholders_without_data_are_stored_too(tg: FakeBotAPI) -> None:
    tg.push_voice(USER)
    tg.push_document(USER)
    async with make_bot(tg) as bot:
        voice, doc = await messages(bot, 2)
        assert doc.document.mime_type == "text/plain"
        for file_id in (voice.voice.file_id, doc.document.file_id):
            data = await (await bot.get_file(file_id)).download_as_bytearray()
            assert bytes(data) == f"fake-file:{file_id}".encode()


async def test_album_shares_one_group_and_captions_the_first(tg: FakeBotAPI) -> None:
    photos = [{"photo": make_image(100 + i, 80)} for i in range(3)]
    ids = tg.push_album(USER, photos, caption="trip @tgagent_test_bot")
    again = tg.push_album(USER, [{"document": b"a", "file_name": "a.md"}] * 2)
    assert ids == [ids[0], ids[0] + 1, ids[0] + 2] and again[0] == ids[-1] + 1
    async with make_bot(tg) as bot:
        album = await messages(bot, 5)
    first, docs = album[:3], album[3:]
    assert len({m.media_group_id for m in first}) == 1 and first[0].media_group_id
    assert [m.caption for m in first] == ["trip @tgagent_test_bot", None, None]
    assert first[0].caption_entities[0].type == "mention"
    assert [m.photo[-1].width for m in first] == [100, 101, 102]
    assert docs[0].media_group_id == docs[1].media_group_id != first[0].media_group_id
    assert docs[0].document.mime_type == "text/markdown"


def test_album_refuses_what_telegram_cannot_send(tg: FakeBotAPI) -> None:
    with pytest.raises(ValueError, match="2 to 10"):
        tg.push_album(USER, [{"photo": make_image()}])
    with pytest.raises(ValueError, match="2 to 10"):
        tg.push_album(USER, [{"photo": make_image()}, {"document": b"x", "file_name": "x.txt"}])
    with pytest.raises(ValueError, match="image"):
        tg.push_photo(USER, data=b"not an image")


async def test_get_file_refuses_an_unknown_file_id(tg: FakeBotAPI) -> None:
    async with make_bot(tg) as bot:
        with pytest.raises(BadRequest, match="Invalid file_id"):
            await bot.get_file("voice-file-999999")
    assert tg.downloads == []


async def test_get_file_refuses_a_file_over_the_download_limit(tg: FakeBotAPI) -> None:
    tg.download_limit = 10
    tg.push_document(USER, "big.txt", data=b"x" * 11)
    tg.push_document(USER, "small.txt", data=b"x" * 10)
    async with make_bot(tg) as bot:
        big, small = await messages(bot, 2)
        with pytest.raises(BadRequest, match="File is too big"):
            await bot.get_file(big.document.file_id)
        assert (await bot.get_file(small.document.file_id)).file_size == 10
    assert tg.downloads == []


def test_download_route_refuses_unknown_paths_and_wrong_tokens(tg: FakeBotAPI) -> None:
    stored = tg.files.get(tg.add_file(b"data", "document", "a.txt")["file_id"])
    assert stored is not None and stored.file_path.endswith(".txt")
    base = tg.base_file_url
    assert http_status(f"{base}{TOKEN}/{stored.file_path}") == 200
    assert http_status(f"{base}{TOKEN}/documents/file_999.txt") == 404
    assert http_status(f"{base}123:WRONG/{stored.file_path}") == 401
    assert tg.downloads == [stored.file_id]


async def test_injected_download_failure_then_success(tg: FakeBotAPI) -> None:
    tg.push_voice(USER, fake_speech("hello"))
    tg.fail_downloads_next(1, 500)
    async with make_bot(tg) as bot:
        (msg,) = await messages(bot, 1)
        file = await bot.get_file(msg.voice.file_id)
        with pytest.raises(NetworkError):
            await file.download_as_bytearray()
        assert tg.downloads == []
        assert bytes(await file.download_as_bytearray()) == fake_speech("hello")
    assert tg.downloads == [msg.voice.file_id]
