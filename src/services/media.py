"""Voice notes, photos and documents turned into a turn's text (issue 17).

What is stored of media is text: a voice note's transcript, a photo's description, a
document's extracted text, each behind a bracketed label the model and the search read
(`[Voice message 0:12] ...`, `[Photo: ...]`, `[Document: report.pdf, 3 pages] ...`).
Images go to the chat model only in the turn they arrive in, as image parts.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import openai
from langchain_core.messages import HumanMessage, SystemMessage

from src.graph import prompts
from src.graph.context.budget import Layers, truncate_text
from src.graph.deps import GraphDeps
from src.graph.lang import lang_of
from src.graph.model_calls import call_config
from src.graph.output_caps import with_output_cap
from src.media.document_types import Document, DocumentError, TextBudget
from src.media.images import ImageError, Picture, is_image, prepare_image
from src.media.sandbox import Sandbox
from src.media.transcribe import Transcriber, TranscriptionError
from src.services.texts import t
from src.services.usage import Usage

logger = logging.getLogger(__name__)

# A transcript up to this long is shown back to the user ("🎤 ..."), so they see what
# was heard; a longer one would only repeat their own note at length.
HEARD_MAX_CHARS = 300
# The model's description of a photo: one or two sentences.
DESCRIPTION_TOKENS = 200
# Characters per token no text comes near: a document is first cut to its budget times
# this, so counting tokens never walks a whole 300-page book.
CHARS_PER_TOKEN_BOUND = 8


@dataclass(frozen=True)
class Upload:
    """One file of a message, downloaded: what it is and its bytes."""

    kind: str
    """"voice", "audio", "photo" or "document"."""
    data: bytes
    file_name: str = ""
    mime_type: str | None = None
    seconds: int = 0
    """A voice note's or audio file's length."""


@dataclass
class MediaTurn:
    """What a message with media (or an album) brings to the conversation."""

    text: str = ""
    """The user's message as stored (before its time stamp): labels, transcripts,
    descriptions, documents' text, and the caption last."""
    kinds: list[str] = field(default_factory=list)
    """What it held, in order ("voice", "photo", ...): stored in the message's meta."""
    images: list[str] = field(default_factory=list)
    """Data URLs of the photos, sent to the model in this turn only (VISION=true)."""
    problems: list[str] = field(default_factory=list)
    """One sentence for each file that could not be read."""
    heard: str | None = None
    """A short transcript to show the user."""
    answer: bool = True
    """False: store the message and acknowledge it (documents without a caption: the
    next message asks about them)."""
    read: list[str] = field(default_factory=list)
    """The acknowledgement's parts: one per document read."""
    siblings: list[int] = field(default_factory=list)
    """The album's other updates, answered by this one's turn."""
    owner_id: int | None = None
    """Whose memory the message goes to: its transcription and description are theirs."""
    sender_id: int | None = None
    """Who sent it, in a group: their own budgets count its transcription too."""

    @property
    def meta(self) -> dict[str, Any]:
        """The stored message's meta: what kind of media it was."""
        return {"media": self.kinds}


def duration(seconds: int) -> str:
    """Render a length as `m:ss`."""
    return f"{seconds // 60}:{seconds % 60:02d}"


class MediaReader:
    """Turn the files of one message (or album) into a MediaTurn."""

    def __init__(self, deps: GraphDeps, usage: Usage | None = None) -> None:
        self.deps = deps
        self.settings = deps.settings
        recorder = usage.recorder if usage is not None else None
        self.transcriber = (
            Transcriber(deps.settings, recorder) if deps.settings.transcription_on else None
        )
        self.sandbox = Sandbox(deps.settings.document_read_seconds, deps.settings.document_read_mb)

    async def check_transcription(self) -> None:
        """Probe the transcription endpoint; one that has none turns transcription off, so
        voice notes get "not transcribed here" rather than a failure each."""
        if self.transcriber is None:
            return
        missing = await self.transcriber.probe()
        if missing is None:
            return
        logger.warning(
            "transcription is off: %s answered %s for TRANSCRIBE_MODEL=%s"
            " (set TRANSCRIBE_BASE_URL to a speech-to-text endpoint, or TRANSCRIBE_MODEL= to"
            " silence this)",
            self.transcriber.endpoint,
            missing,
            self.transcriber.model,
        )
        await self.transcriber.close()
        self.transcriber = None

    async def read(
        self,
        uploads: list[Upload],
        caption: str,
        lang: str | None,
        owner_id: int | None = None,
        sender_id: int | None = None,
    ) -> MediaTurn:
        """Read every upload; what fails becomes a sentence in `problems`, the rest the
        turn's text. Nothing to store (`text` empty) when nothing could be read and there
        is no caption. The models' calls are recorded as `owner_id`'s."""
        turn = MediaTurn(owner_id=owner_id, sender_id=sender_id)
        parts: list[str] = []
        pictures: list[Picture] = []
        for upload in uploads:
            kind = upload.kind
            if kind == "document" and is_image(upload.mime_type, upload.file_name):
                kind = "photo"  # a screenshot sent as a file, uncompressed
            if kind in ("voice", "audio"):
                part = await self._listen(upload, turn, lang)
            elif kind == "photo":
                part = await self._look(upload, pictures, turn, lang)
            else:
                part = await self._document(upload, turn, lang)
            if part is not None:
                turn.kinds.append(kind)
                if part:
                    parts.append(part)
        if pictures:
            parts.insert(0, await self._describe(pictures, caption, turn, lang))
        if caption:
            parts.append(caption)
        heard = any(kind in ("voice", "audio") for kind in turn.kinds)
        # Answered: what the user said, or a photo the model sees. Documents alone are
        # acknowledged: the caption, or the next message, asks about them.
        turn.answer = bool(caption) or heard or bool(turn.images)
        if turn.answer or turn.read:
            turn.text = "\n\n".join(parts)
        elif "photo" in turn.kinds:
            turn.problems.append(t("photo_unseen", lang))  # nobody sees it, nothing said
        return turn

    # --- voice notes and audio files --------------------------------------------------

    async def _listen(self, upload: Upload, turn: MediaTurn, lang: str | None) -> str | None:
        label = (
            f"[Voice message {duration(upload.seconds)}]"
            if upload.kind == "voice"
            else f"[Audio file: {upload.file_name}, {duration(upload.seconds)}]"
        )
        if self.transcriber is None:
            turn.problems.append(t("voice_off", lang))
            return None
        try:
            heard = await self.transcriber.transcribe(
                upload.data, upload.file_name, upload.seconds, turn.owner_id, turn.sender_id
            )
        except TranscriptionError as exc:
            logger.warning("transcription failed: %s", exc)
            turn.problems.append(t("voice_failed", lang))
            return None
        if not heard:
            turn.problems.append(t("voice_silent", lang))
            return None
        if len(heard) <= HEARD_MAX_CHARS and turn.heard is None:
            turn.heard = heard
        return f"{label} {heard}"

    # --- photos -------------------------------------------------------------------------

    async def _look(
        self, upload: Upload, pictures: list[Picture], turn: MediaTurn, lang: str | None
    ) -> str | None:
        """Return "[Photo]" without VISION; with it, keep the photo for `_describe` ("")."""
        if not self.settings.vision:
            return "[Photo]"
        try:
            picture = await asyncio.to_thread(prepare_image, upload.data)
        except ImageError as exc:
            logger.info("unreadable photo: %s", exc)
            turn.problems.append(t("photo_broken", lang))
            return None
        pictures.append(picture)
        return ""

    async def _describe(
        self, pictures: list[Picture], caption: str, turn: MediaTurn, lang: str | None
    ) -> str:
        """Return the photos' label with a short description the chat model wrote, and
        hand the photos to the turn's model call (`turn.images`)."""
        urls = [p.data_url() for p in pictures]
        label = "Photo" if len(urls) == 1 else f"{len(urls)} photos"
        language = "Russian" if lang_of(lang) == "ru" else "English"
        content: list[str | dict[str, Any]] = [
            {"type": "text", "text": prompts.describe_request(caption)},
            *({"type": "image_url", "image_url": {"url": url}} for url in urls),
        ]
        request = [SystemMessage(prompts.DESCRIBE_IMAGES.format(language=language))]
        model = with_output_cap(self.deps.chat_model, DESCRIPTION_TOKENS)
        try:
            config = call_config("describe", turn.owner_id, sender_id=turn.sender_id)
            answer = await model.ainvoke([*request, HumanMessage(content)], config)
        except openai.BadRequestError as exc:
            # A text-only model with VISION=true: the turn goes on without the photos.
            logger.warning("the chat model refused the photos (not a vision model?): %s", exc)
            if caption:  # without one, `read` says the photo is unseen
                turn.problems.append(t("photo_refused", lang))
            return f"[{label}]"
        except Exception as exc:
            logger.warning("could not describe the photos: %s", exc)
            turn.images = urls
            return f"[{label}]"
        turn.images = urls
        description = " ".join(answer.text.split())
        return f"[{label}: {description}]" if description else f"[{label}]"

    # --- documents ----------------------------------------------------------------------

    async def _document(self, upload: Upload, turn: MediaTurn, lang: str | None) -> str | None:
        name = upload.file_name or "document"
        # One character past what `_cut` keeps: a text cut here still gets its note.
        budget = TextBudget(chars=self._token_budget() * CHARS_PER_TOKEN_BOUND + 1)
        try:
            document = await self.sandbox.read(
                upload.data, upload.file_name, upload.mime_type, budget
            )
        except DocumentError as exc:
            logger.info("document %r not read: %s", name, exc.reason)
            turn.problems.append(t(f"document_{exc.reason}", lang, name=name))
            return None
        text, note = self._cut(document)
        turn.read.append(self._read_line(name, document, lang))
        pages = f", {document.pages} pages" if document.pages else ""
        body = f"[Document: {name}{pages}]\n{text}"
        return f"{body}\n{note}" if note else body

    def _token_budget(self) -> int:
        """Return the tokens of a document's text a turn keeps."""
        settings = self.settings
        return settings.document_tokens or (
            Layers.for_model(settings, settings.llm_model).working // 2
        )

    def _cut(self, document: Document) -> tuple[str, str]:
        """Cut the document's text to its token budget; return it and a note if cut."""
        budget, counter = self._token_budget(), self.deps.counter
        text = document.text
        head = text[: budget * CHARS_PER_TOKEN_BOUND]
        kept = truncate_text(head, budget, counter)
        skipped = document.truncated_pages
        if kept == text and not skipped:
            return text, ""
        share = round(100 * len(kept) / max(1, len(text)))
        note = f"[Cut: only the first {share}% of the document's text is kept here"
        note += f"; {skipped} more pages were not read]" if skipped else "]"
        return kept, note

    @staticmethod
    def _read_line(name: str, document: Document, lang: str | None) -> str:
        words = len(document.text.split())
        if document.pages:
            return t("document_pages", lang, name=name, pages=document.pages, words=words)
        return t("document_words", lang, name=name, words=words)

    async def close(self) -> None:
        """Close the transcription endpoint's client."""
        if self.transcriber is not None:
            await self.transcriber.close()
