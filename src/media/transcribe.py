"""Speech to text through an OpenAI-compatible `/v1/audio/transcriptions` endpoint.

With a recorder, every request is recorded as a "transcription" call with the audio's
length in seconds (speech-to-text is priced per minute: MODEL_PRICES' `audio_minute`)
and the tokens the endpoint reports (the "-transcribe" models report them); an endpoint
that reports no tokens is recorded with none, marked estimated.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import openai
from pydantic import SecretStr

from src.config import Settings
from src.storage.usage_repo import CallRecord

if TYPE_CHECKING:
    from src.services.usage import UsageRecorder

logger = logging.getLogger(__name__)


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

        `file_name`'s extension tells the endpoint the format (`.oga` for a voice note);
        `seconds` (the audio's length), `owner_id` and a group's `sender_id` go into the
        call's usage record.
        """
        record = CallRecord("transcription", self.model, owner_id, audio_seconds=seconds)
        record.sender_id = sender_id if sender_id != owner_id else None
        started = time.perf_counter()
        try:
            result = await self.client.audio.transcriptions.create(
                model=self.model, file=(file_name, data)
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

    async def close(self) -> None:
        """Close the HTTP client."""
        await self.client.close()


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
