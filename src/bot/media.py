"""Voice notes, audio files, photos and documents from Telegram: albums gathered into one
turn, files checked and downloaded, then read (src/services/media.py) into the turn's text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from datetime import timedelta
from pathlib import PurePosixPath

from telegram import Bot, Message, PhotoSize, Update
from telegram.error import BadRequest, TelegramError
from telegram.ext import filters

from src.bot.live import LiveReply
from src.bot.state import BotState
from src.config import Settings
from src.services.media import MediaTurn, Upload, duration
from src.services.texts import t

logger = logging.getLogger(__name__)

MEDIA = filters.VOICE | filters.AUDIO | filters.PHOTO | filters.Document.ALL
# Telegram lets bots download files up to 20 MB (getFile).
DOWNLOAD_LIMIT_MB = 20
# An album's items arrive as separate updates a moment apart: its first item's job
# waits until none came for ALBUM_QUIET seconds, and at most ALBUM_WAIT.
ALBUM_QUIET = 1.0
ALBUM_WAIT = 5.0
# The photo size asked for: the smallest whose long side reaches what the model is sent.
PHOTO_SIDE = 1568
MB = 1024 * 1024


async def gather_album(
    state: BotState, bot: Bot, update: Update
) -> tuple[list[Message], list[int]]:
    """Return the album's messages (this one first) and the other items' update ids.

    Only the first item's job gets here with the others unanswered: the turn it runs
    marks them answered when it stores the user's message.
    """
    message = update.message
    assert message is not None
    group = message.media_group_id
    if group is None:
        return [message], []
    repo = state.service.deps.delivery
    started = time.monotonic()
    while True:
        rows = await repo.album(message.chat_id, group, update.update_id)
        waited = time.monotonic() - started
        quiet = min((age for _, _, age in rows), default=waited)
        if min(quiet, waited) >= ALBUM_QUIET or waited >= ALBUM_WAIT:
            break
        await asyncio.sleep(max(0.05, ALBUM_QUIET - min(quiet, waited)))
    others = [Update.de_json(payload, bot).message for _, payload, _ in rows]
    return [message, *(m for m in others if m is not None)], [i for i, _, _ in rows]


async def until_stopped(
    state: BotState, bot: Bot, message: Message, turn: int, work: Awaitable[MediaTurn]
) -> MediaTurn | None:
    """Read the message's files as the chat's turn (`turn`: its update id), which /stop
    can end; None if stopped.

    Stopping cancels the reading, which kills a document's reader process at once.
    """
    handle = LiveReply(bot, message, turn, show=False)  # shows nothing: what /stop finds
    state.live.add(handle)
    reading = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(handle.stream.stop.wait())
    try:
        await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        state.live.remove(handle)
        if not reading.done():  # stopped, or this handler was cancelled (shutdown)
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
    return None if reading.cancelled() else reading.result()


def caption_of(messages: list[Message]) -> Message | None:
    """Return the album's message that carries the caption (Telegram puts it on one)."""
    return next((m for m in messages if m.caption), None)


async def uploads_of(
    bot: Bot, messages: list[Message], settings: Settings, lang: str | None
) -> tuple[list[Upload], list[str]]:
    """Download the messages' files; return them and a sentence for each one refused."""
    uploads: list[Upload] = []
    problems: list[str] = []
    for message in messages:
        try:
            upload = await _upload(bot, message, settings, lang)
        except _Refused as refused:
            problems.append(str(refused))
            continue
        if upload is not None:
            uploads.append(upload)
    return uploads, problems


class _Refused(Exception):
    """A file not downloaded, with the sentence that tells the user why."""


async def _upload(
    bot: Bot, message: Message, settings: Settings, lang: str | None
) -> Upload | None:
    if message.voice is not None or message.audio is not None:
        media = message.voice or message.audio
        assert media is not None
        seconds = _seconds(media.duration)
        if seconds > settings.max_voice_seconds:
            raise _Refused(
                t(
                    "voice_too_long",
                    lang,
                    minutes=round(seconds / 60, 1),
                    limit=round(settings.max_voice_seconds / 60, 1),
                )
            )
        kind = "voice" if message.voice is not None else "audio"
        name = getattr(media, "file_name", None)
        data, path = await _download(bot, media.file_id, media.file_size, name, lang)
        name = name or _name_of(path, "voice.oga")
        return Upload(kind, data, name, media.mime_type, seconds)
    if message.photo:
        size = _photo_size(message.photo)
        data, _ = await _download(bot, size.file_id, size.file_size, "photo.jpg", lang)
        return Upload("photo", data, "photo.jpg", "image/jpeg")
    if message.document is not None:
        document = message.document
        name = document.file_name or "document"
        limit = min(settings.max_document_mb, DOWNLOAD_LIMIT_MB)
        if document.file_size is not None and document.file_size > limit * MB:
            raise _Refused(_too_big(name, document.file_size, limit, lang))
        data, path = await _download(bot, document.file_id, document.file_size, name, lang)
        if len(data) > limit * MB:
            raise _Refused(_too_big(name, len(data), limit, lang))
        return Upload("document", data, name, document.mime_type)
    return None


def _seconds(value: int | timedelta) -> int:
    """Return a duration in seconds (PTB gives an int or, when asked to, a timedelta)."""
    return int(value.total_seconds()) if isinstance(value, timedelta) else int(value)


def _photo_size(sizes: tuple[PhotoSize, ...]) -> PhotoSize:
    """Return the smallest size at least PHOTO_SIDE on its long side, else the largest."""
    ordered = sorted(sizes, key=lambda s: s.width * s.height)
    return next((s for s in ordered if max(s.width, s.height) >= PHOTO_SIDE), ordered[-1])


async def _download(
    bot: Bot, file_id: str, size: int | None, name: str | None, lang: str | None
) -> tuple[bytes, str]:
    """Download a file; return its bytes and its path on Telegram's side."""
    label = name or "file"
    if size is not None and size > DOWNLOAD_LIMIT_MB * MB:
        raise _Refused(_too_big(label, size, DOWNLOAD_LIMIT_MB, lang))
    try:
        file = await bot.get_file(file_id)
        data = await file.download_as_bytearray()
    except BadRequest as exc:
        logger.warning("could not download %s: %s", label, exc)
        if "too big" in exc.message.lower():
            raise _Refused(_too_big(label, size or 0, DOWNLOAD_LIMIT_MB, lang)) from None
        raise _Refused(t("download_failed", lang, name=label)) from None
    except TelegramError as exc:
        logger.warning("could not download %s: %s", label, exc)
        raise _Refused(t("download_failed", lang, name=label)) from None
    return bytes(data), file.file_path or ""


def _too_big(name: str, size: int, limit: float, lang: str | None) -> str:
    return t("file_too_big", lang, name=name, size=round(size / MB, 1), limit=round(limit, 1))


def _name_of(path: str, default: str) -> str:
    """Return a file name from Telegram's file path (`voice/file_3.oga` -> `file_3.oga`)."""
    return PurePosixPath(path).name or default


def unread(messages: list[Message], caption: str, siblings: list[int]) -> tuple[str, MediaTurn]:
    """Return the text and MediaTurn of an album kept without reading it: each file's
    label (not transcribed, not described, not extracted) and the caption."""
    parts: list[str] = []
    turn = MediaTurn(siblings=siblings)
    for message in messages:
        if message.voice is not None:
            seconds = _seconds(message.voice.duration)
            parts.append(f"[Voice message {duration(seconds)}, not transcribed]")
            turn.kinds.append("voice")
        elif message.audio is not None:
            parts.append(f"[Audio file: {message.audio.file_name or 'audio'}, not transcribed]")
            turn.kinds.append("audio")
        elif message.photo:
            parts.append("[Photo]")
            turn.kinds.append("photo")
        elif message.document is not None:
            parts.append(f"[Document: {message.document.file_name or 'document'}, not read]")
            turn.kinds.append("document")
    turn.text = "\n\n".join([*parts, caption] if caption else parts)
    return turn.text, turn


def acknowledgement(turn: MediaTurn, lang: str | None) -> str:
    """Say which documents were read, for a message that only brought documents."""
    return t("documents_read", lang, files=", ".join(turn.read))
