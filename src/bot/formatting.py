"""Fit replies into Telegram messages: render Markdown as text plus entities, split at 4096.

The model's Markdown is rendered by telegramify-markdown (CommonMark through pulldown-cmark)
into plain text and MessageEntity objects, so no markup can be left half-open by a cut: the
split happens on the rendered text, in UTF-16 units as Telegram counts them, and each
entity is clipped to the parts it spans. A part that would render empty is never made.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pyromark
from telegram import MessageEntity
from telegram.error import BadRequest
from telegramify_markdown import RenderConfig, convert
from telegramify_markdown.converter import STANDARD_OPTIONS

TELEGRAM_LIMIT = 4096
# Characters that belong to the character before them: a cut before one would break a
# grapheme (accents, emoji modifiers, flags, ZWJ sequences).
_JOINERS = {"\u200d", "\ufe0e", "\ufe0f"}
_SENTENCE_END = re.compile(r"[.!?…。！？][\"'»”’)\]]*(?=\s)")


def utf16_len(text: str) -> int:
    """Return the length of `text` in UTF-16 code units, as Telegram counts it."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _fits(text: str, limit: int) -> int:
    """Return how many leading characters of `text` fit into `limit` UTF-16 units."""
    used = 0
    for i, ch in enumerate(text):
        used += 2 if ord(ch) > 0xFFFF else 1
        if used > limit:
            return i
    return len(text)


def _glued(ch: str) -> bool:
    """Tell whether `ch` must stay with the character before it."""
    return (
        ch in _JOINERS
        or unicodedata.combining(ch) != 0
        or 0x1F3FB <= ord(ch) <= 0x1F3FF  # skin tone modifiers
        or 0xE0020 <= ord(ch) <= 0xE007F  # tag sequences (subdivision flags)
    )


def _hard_cut(text: str, window: int) -> int:
    """Return a cut at or before `window` that splits no grapheme, if one is near."""
    cut = window
    while cut > 1 and window - cut < 32 and (_glued(text[cut]) or text[cut - 1] == "\u200d"):
        cut -= 1
    return cut if cut > 1 and window - cut < 32 else window


def _best_cut(text: str, window: int) -> tuple[int, int]:
    """Return (end of this chunk, start of the next) for a text longer than `window`."""
    head = text[:window]
    floor = window // 2  # prefer a boundary in the second half: no tiny chunks
    for sep in ("\n\n", "\n"):
        i = head.rfind(sep)
        if i >= floor:
            return i, i + len(sep)
    ends = [m.end() for m in _SENTENCE_END.finditer(head) if m.end() >= floor]
    if ends:
        return ends[-1], ends[-1] + 1  # the whitespace after the sentence goes
    for lowest in (floor, 1):
        i = max(head.rfind(" ", lowest), head.rfind("\t", lowest), head.rfind("\n", lowest))
        if i >= lowest:
            return i, i + 1
    cut = _hard_cut(text, window)
    return cut, cut


def _spans(text: str, limit: int) -> list[tuple[int, int]]:
    """Return the [start, end) ranges of `text` that `split_message` makes chunks of."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    spans: list[tuple[int, int]] = []
    start, stop = len(text) - len(text.lstrip()), len(text.rstrip())
    while start < stop:
        rest = text[start:stop]
        window = _fits(rest, limit)
        if window == len(rest):
            spans.append((start, stop))
            break
        end, after = _best_cut(rest, window)
        kept = len(rest[:end].rstrip())
        if kept:
            spans.append((start, start + kept))
        # After a line break the next chunk keeps its indentation (code); else no blanks.
        tail = rest[after:]
        tail = tail.lstrip("\r\n") if "\n" in rest[end:after] else tail.lstrip()
        if not tail.strip():
            break
        start = stop - len(tail)
    return spans


def split_message(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Split `text` into chunks of at most `limit` UTF-16 units, on the best boundaries.

    Paragraphs first, then lines, sentences, words; a single word longer than the limit
    is cut where no grapheme breaks. Whitespace at the cuts is dropped (a line's indentation
    is kept); no chunk is empty.
    """
    return [text[start:end] for start, end in _spans(text, limit)]


# --- Markdown (as models write it) to Telegram text plus entities ------------------------


@dataclass(frozen=True)
class Part:
    """One Telegram message of a reply: its text and the entities that format it."""

    text: str
    entities: tuple[MessageEntity, ...] = field(default=())


# Links Telegram opens; any other (a relative path, a local host) makes it refuse the
# whole message, so such a link keeps its text and loses its target.
_LINK_SCHEMES = {"http", "https", "tg", "mailto"}
# What the renderer makes that a bot may send; a custom emoji needs a paid username.
_STYLES = {
    MessageEntity.BOLD, MessageEntity.ITALIC, MessageEntity.UNDERLINE,
    MessageEntity.STRIKETHROUGH, MessageEntity.SPOILER, MessageEntity.CODE, MessageEntity.PRE,
    MessageEntity.TEXT_LINK, MessageEntity.BLOCKQUOTE, MessageEntity.EXPANDABLE_BLOCKQUOTE,
}  # fmt: skip


def _render_config() -> RenderConfig:
    """Return the library's settings for replies: headings without emoji in front."""
    config = RenderConfig.isolated()
    symbols = config.markdown_symbol
    for level in range(1, 7):
        setattr(symbols, f"heading_level_{level}", "")
    return config


_CONFIG = _render_config()


def _openable(url: str | None) -> bool:
    """Tell whether Telegram accepts `url` as a link's target."""
    parts = urlsplit(url or "")
    if parts.scheme in ("http", "https"):
        return "." in parts.netloc
    return parts.scheme in _LINK_SCHEMES


def _literal_html(text: str) -> str:
    """Escape the `<` of whatever CommonMark reads as HTML, which the renderer would drop.

    Models write `<branch>`, `x<y and y>z` or a stray `<b>` as text; Telegram shows it as
    written. Each pass escapes what the parser saw (UTF-8 byte offsets); escaping an HTML
    block can reveal inline HTML inside it, hence the few passes.
    """
    for _ in range(4):
        data = text.encode()
        marks = sorted(
            data.index(b"<", where["start"], where["end"])
            for event, where in pyromark.events_with_range(text, options=STANDARD_OPTIONS)
            if isinstance(event, dict)
            and ("Html" in event or "InlineHtml" in event)
            and b"<" in data[where["start"] : where["end"]]
        )
        if not marks:
            break
        bounds = [0, *marks, len(data)]
        text = b"\\".join(data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)).decode()
    return text


def render_markdown(text: str) -> Part:
    """Render the model's Markdown as Telegram text plus entities (UTF-16 offsets).

    Bold, italic, underline, strikethrough, spoilers, code, code blocks with their
    language, links, block quotes; headings become bold lines, lists get markers, tables
    become aligned code blocks.
    """
    rendered, found = convert(_literal_html(text), latex_escape=False, config=_CONFIG)
    entities = tuple(
        MessageEntity(e.type, e.offset, e.length, url=e.url, language=e.language)
        for e in found
        if e.length > 0
        and e.type in _STYLES
        and (e.type != MessageEntity.TEXT_LINK or _openable(e.url))
    )
    return Part(rendered, entities)


def _utf16_offsets(text: str) -> list[int]:
    """Return the UTF-16 offset of every character of `text`, and of its end."""
    offsets = [0] * (len(text) + 1)
    for i, ch in enumerate(text):
        offsets[i + 1] = offsets[i] + (2 if ord(ch) > 0xFFFF else 1)
    return offsets


def split_part(part: Part, limit: int = TELEGRAM_LIMIT) -> list[Part]:
    """Split a rendered reply where `split_message` splits its text; clip its entities.

    An entity across a cut continues in the next part (a code block becomes two); one
    that covers only the whitespace dropped at a cut goes.
    """
    offsets = _utf16_offsets(part.text)
    parts: list[Part] = []
    for start, end in _spans(part.text, limit):
        low, high = offsets[start], offsets[end]
        clipped = []
        for e in part.entities:
            a, b = max(e.offset, low), min(e.offset + e.length, high)
            if a < b:
                clipped.append(
                    MessageEntity(e.type, a - low, b - a, url=e.url, language=e.language)
                )
        parts.append(Part(part.text[start:end], tuple(clipped)))
    return parts


def reply_parts(text: str, fmt: str, raw_if_empty: bool = True) -> list[Part]:
    """Return the messages a reply is sent as: Markdown rendered, or plain text as is.

    Markdown that renders to nothing (an empty code fence) is sent as written, unless
    `raw_if_empty` is off (a live reply's text so far: its fence may be just opening);
    [] only for a text of whitespace, which Telegram refuses.
    """
    if fmt == "markdown":
        parts = split_part(render_markdown(text))
        if parts or not raw_if_empty:
            return parts
    return [Part(chunk) for chunk in split_message(text)]


def refuses_formatting(exc: BadRequest) -> bool:
    """Tell whether Telegram refused a message for its formatting (send it unformatted)."""
    text = exc.message.lower()
    return "entities" in text or "entity" in text
