"""Speech to text through an OpenAI-compatible `/v1/audio/transcriptions` endpoint.

With a recorder, every request is recorded as a "transcription" call with the audio's
length in seconds (speech-to-text is priced per minute: MODEL_PRICES' `audio_minute`)
and the tokens the endpoint reports (the "-transcribe" models report them); an endpoint
that reports no tokens is recorded with none, marked estimated.
"""

from __future__ import annotations

import logging
import time
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import httpx
import openai
from pydantic import SecretStr

from src.config import Settings
from src.storage.usage_repo import CallRecord

if TYPE_CHECKING:
    from src.services.usage import UsageRecorder

logger = logging.getLogger(__name__)

# Telegram names voice notes `.oga` (Ogg Opus); gpt-4o-*-transcribe and Groq refuse that
# extension ("Unsupported file format oga") but take the same bytes as `.ogg`.
OGG_NAMES = (".oga", ".opus")
# A probe is one request the endpoint refuses before doing any work: a transcription
# without a file. Its answer says whether the endpoint has speech-to-text at all.
PROBE_TIMEOUT = 10.0
MISSING = (404, 405)  # no such route, or not for POST: no speech-to-text there
REFUSED = (401, 403)  # the key is refused: every voice note would fail the same way


class TranscriptionError(Exception):
    """The endpoint could not transcribe the audio (refused it, failed, or timed out)."""


class Transcriber:
    """Transcribe audio with TRANSCRIBE_MODEL; endpoint and key default to the chat model's."""

    def __init__(self, settings: Settings, recorder: UsageRecorder | None = None) -> None:
        # Local servers need no key, but the client insists on one.
        key = settings.transcribe_api_key or settings.openai_api_key or SecretStr("not-needed")
        self.model = settings.transcribe_model
        self.recorder = recorder
        self.client = openai.AsyncOpenAI(
            api_key=key.get_secret_value(),
            base_url=settings.transcribe_base_url or settings.openai_base_url,
            timeout=settings.transcribe_timeout,
            max_retries=settings.llm_max_retries,
        )

    async def transcribe(
        self,
        data: bytes,
        file_name: str,
        seconds: float = 0,
        owner_id: int | None = None,
        sender_id: int | None = None,
    ) -> str:
        """Return what is said in the audio `data` ("" for silence).

        `file_name`'s extension tells the endpoint the format (a voice note's `.oga` is
        sent as `.ogg`); `seconds` (the audio's length), `owner_id` and a group's
        `sender_id` go into the call's usage record.
        """
        record = CallRecord("transcription", self.model, owner_id, audio_seconds=seconds)
        record.sender_id = sender_id if sender_id != owner_id else None
        started = time.perf_counter()
        try:
            result = await self.client.audio.transcriptions.create(
                model=self.model, file=upload_file(file_name, data)
            )
        except openai.APIError as exc:
            record.status, record.error_class = "error", type(exc).__name__
            # The client's errors carry the status and the server's message, never the key.
            raise TranscriptionError(f"{type(exc).__name__}: {exc}") from None
        else:
            _read_usage(record, getattr(result, "usage", None))
        finally:
            record.latency_ms = (time.perf_counter() - started) * 1000
            if self.recorder is not None:
                self.recorder.record(record)
        return result.text.strip()

    async def probe(self) -> str | None:
        """Ask the endpoint whether it transcribes; return why not, or None if it does
        (or cannot be asked now: a voice note will tell)."""
        client = self.client.with_options(max_retries=0, timeout=PROBE_TIMEOUT)
        try:
            # A form without its file: refused (400) by an endpoint that transcribes,
            # unknown (404) to one that does not; free either way.
            await client.post(
                "/audio/transcriptions",
                cast_to=httpx.Response,
                body={"model": self.model},
                files=[],
                options={"headers": {"Content-Type": "multipart/form-data"}},
            )
        except openai.APIStatusError as exc:
            if exc.status_code in MISSING + REFUSED:
                return f"{exc.status_code} {exc.message}"
        except openai.APIError as exc:
            logger.warning("could not ask %s about transcription: %s", self.endpoint, exc)
        return None

    @property
    def endpoint(self) -> str:
        """Return the endpoint's URL for logs (without a user name or password in it)."""
        return str(self.client.base_url.copy_with(userinfo=b""))

    async def close(self) -> None:
        """Close the HTTP client."""
        await self.client.close()


def upload_file(file_name: str, data: bytes) -> tuple[str, bytes, str | None]:
    """Return the (name, bytes, MIME type) the endpoint is sent: Ogg audio as `.ogg`."""
    path = PurePosixPath(file_name or "audio")
    if path.suffix.lower() in OGG_NAMES:
        return str(path.with_suffix(".ogg")), data, "audio/ogg"
    return file_name, data, None


def _read_usage(record: CallRecord, usage: Any) -> None:
    """Fill `record` from a transcription's `usage`: tokens, or the audio's duration."""
    if usage is None:
        record.estimated = True
        return
    kind = getattr(usage, "type", None)
    if kind == "duration":
        record.audio_seconds = float(getattr(usage, "seconds", 0) or record.audio_seconds or 0)
        return
    if kind == "tokens":
        record.input_tokens = int(getattr(usage, "input_tokens", 0) or 0)
        record.output_tokens = int(getattr(usage, "output_tokens", 0) or 0)
        return
    record.estimated = True
