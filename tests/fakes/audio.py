"""Fake speech, and the rules of OpenAI's `/v1/audio/transcriptions`, for the fake server.

`fake_speech(text, fmt)` makes bytes that start like a real file of that format (the magic
bytes a decoder checks) and carry `text` between markers; the fake server "hears" that
text. Bytes with an audio header and no marker are silence, transcribed as "" as Whisper
does. Everything here is pure: the fake server turns a `Problem` into its HTTP answer.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from typing import Any

SUPPORTED_EXTENSIONS = ("flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm")
NOT_FOR_GPT_TRANSCRIBE = ("oga",)
RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
DEFAULT_TRANSCRIPTION_MODELS = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")
MAX_TRANSCRIPTION_BYTES = 25 * 1024 * 1024  # OpenAI's limit on the whole request
CORRUPTED = "Audio file might be corrupted or unsupported"
START, END = b"<fake-speech>", b"</fake-speech>"
_LANGUAGE = re.compile(r"[a-z]{2}")
_LANGUAGE_NAMES = {"en": "english", "ru": "russian", "de": "german", "fr": "french"}
_WAV_FMT = struct.pack("<4sIHHIIHH", b"fmt ", 16, 1, 1, 16000, 32000, 2, 16)
# The first bytes of a file of each format, as a decoder recognises it.
HEADERS = {
    "ogg": b"OggS\x00\x02" + bytes(20) + b"\x13OpusHead\x01\x01",
    "wav": b"RIFF" + struct.pack("<I", 36) + b"WAVE" + _WAV_FMT + b"data\x00\x00\x00\x00",
    "mp3": b"ID3\x04\x00\x00\x00\x00\x00\x00\xff\xfb\x90\x64",
    "flac": b"fLaC\x00\x00\x00\x22" + bytes(34),
    "mp4": b"\x00\x00\x00\x20ftypM4A \x00\x00\x02\x00M4A isommp42",
    "webm": b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01",
}
_ALIASES = {"oga": "ogg", "opus": "ogg", "mpga": "mp3", "mpeg": "mp3", "m4a": "mp4"}


@dataclass(frozen=True)
class Problem:
    """An error answer of the transcription endpoint, in OpenAI's error shape."""

    status: int
    message: str
    param: str | None = None
    code: str | None = None
    kind: str = "invalid_request_error"


def fake_speech(text: str, fmt: str = "ogg") -> bytes:
    """Return bytes that look like audio of `fmt` and that the fake server hears as `text`."""
    header = HEADERS[_ALIASES.get(fmt, fmt)]
    return header + bytes(64) + START + text.encode() + END + bytes(16)


def audio_kind(data: bytes) -> str | None:
    """Return the audio format the magic bytes announce ("ogg", "mp3"...), or None."""
    if data.startswith(b"OggS"):
        return "ogg"
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data.startswith(b"ID3") or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"
    if data.startswith(b"fLaC"):
        return "flac"
    if data[4:8] == b"ftyp":
        return "mp4"
    if data.startswith(b"\x1a\x45\xdf\xa3"):
        return "webm"
    return None


def heard(data: bytes) -> str:
    """Return the text `fake_speech` put into audio bytes ("" for silence)."""
    start = data.find(START)
    end = data.find(END, start + len(START))
    if start < 0 or end < 0:
        return ""
    return data[start + len(START) : end].decode("utf-8", "replace")


def too_large(limit: int, size: int) -> Problem:
    """Return OpenAI's answer to a request body of `size` bytes over the `limit`."""
    message = f"Maximum content size limit ({limit}) exceeded ({size} bytes read)"
    return Problem(413, message, kind="server_error")


def transcription_problem(form: dict[str, Any], models: list[str]) -> Problem | None:
    """Return why OpenAI would reject a transcription form, or None if it is fine.

    `form` maps field names to strings, and `file` to a (file name, bytes) pair.
    """
    model, upload = form.get("model"), form.get("file")
    if not model:
        return Problem(400, "you must provide a model parameter")
    if not isinstance(upload, tuple):
        return Problem(400, "Missing required parameter: 'file'.", "file")
    if model not in models:
        message = f"The model `{model}` does not exist or you do not have access to it."
        return Problem(404, message, code="model_not_found")
    problem = _options_problem(form, str(model))
    if problem is not None:
        return problem
    name, data = upload
    extension = str(name or "").rsplit(".", 1)[-1].lower() if "." in str(name or "") else ""
    if "transcribe" in str(model) and extension in NOT_FOR_GPT_TRANSCRIBE:
        # whisper-1 takes `.oga`; the gpt-4o-*-transcribe models refuse the name, even
        # though their error for other names lists it.
        return Problem(400, f"Unsupported file format {extension}", "file", "unsupported_value")
    if extension not in SUPPORTED_EXTENSIONS:
        shown = "[" + ", ".join(repr(e) for e in SUPPORTED_EXTENSIONS) + "]"
        return Problem(400, f"Invalid file format. Supported formats: {shown}")
    if audio_kind(data) is None:
        return Problem(400, CORRUPTED, "file", "invalid_value")
    return None


def _options_problem(form: dict[str, Any], model: str) -> Problem | None:
    """Return why the optional fields (response_format, language, temperature) are invalid."""
    fmt = form.get("response_format") or "json"
    if fmt not in RESPONSE_FORMATS:
        return Problem(
            400,
            f"Invalid value: '{fmt}'. Supported values are: 'json', 'text', 'srt', "
            "'verbose_json', and 'vtt'.",
            "response_format",
            "invalid_value",
        )
    if "transcribe" in model and fmt not in ("json", "text"):
        message = (
            f"response_format '{fmt}' is not compatible with model '{model}'. "
            "Use 'json' or 'text' instead."
        )
        return Problem(400, message, "response_format", "unsupported_value")
    language = form.get("language")
    if language and not _LANGUAGE.fullmatch(language):
        message = (
            f"Invalid language '{language}'. Language parameter must be specified in "
            "ISO-639-1 format."
        )
        return Problem(400, message, "language", "invalid_value")
    return _temperature_problem(form.get("temperature"))


def _temperature_problem(value: str | None) -> Problem | None:
    """Return why a `temperature` field is not a number from 0 to 1, or None."""
    if value is None or value == "":
        return None
    try:
        temperature = float(value)
    except ValueError:
        message = "Invalid type for 'temperature': expected a number, but got a string instead."
        return Problem(400, message, "temperature", "invalid_type")
    if not 0 <= temperature <= 1:
        message = (
            "Invalid 'temperature': decimal out of range. "
            f"Expected a value between 0 and 1, but got {value} instead."
        )
        return Problem(400, message, "temperature", "invalid_value")
    return None


def transcript_body(text: str, fmt: str, language: str | None) -> tuple[str, str]:
    """Return (body, content type) of a transcript in the asked `response_format`."""
    seconds = max(1.0, round(len(text.split()) / 2.5, 2))  # 150 words a minute
    if fmt == "text":
        return text + "\n", "text/plain"
    if fmt == "srt":
        cue = f"1\n00:00:00,000 --> {_clock(seconds, ',')}\n{text}\n\n" if text else ""
        return cue, "text/plain"
    if fmt == "vtt":
        cue = f"00:00:00.000 --> {_clock(seconds, '.')}\n{text}\n\n" if text else ""
        return "WEBVTT\n\n" + cue, "text/plain"
    if fmt == "verbose_json":
        segment = {"id": 0, "seek": 0, "start": 0.0, "end": seconds, "text": " " + text}
        segment |= {"tokens": [], "temperature": 0.0, "avg_logprob": -0.2}
        segment |= {"compression_ratio": 1.0, "no_speech_prob": 0.01}
        name = _LANGUAGE_NAMES.get(language or "en", language)
        body = {"task": "transcribe", "language": name, "duration": seconds, "text": text}
        return json.dumps(body | {"segments": [segment] if text else []}), "application/json"
    return json.dumps({"text": text}), "application/json"


def _clock(seconds: float, comma: str) -> str:
    """Format seconds as a subtitle timestamp (00:00:02,400 for SRT, with "." for VTT)."""
    millis = round(seconds * 1000)
    return f"00:{millis // 60000:02d}:{millis // 1000 % 60:02d}{comma}{millis % 1000:03d}"
