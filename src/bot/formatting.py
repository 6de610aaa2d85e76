"""Fit replies into Telegram messages: split at 4096 characters, render Markdown as HTML."""

from __future__ import annotations

import html
import re
import unicodedata

TELEGRAM_LIMIT = 4096
# Characters that belong to the character before them: a cut before one would break a
# grapheme (accents, emoji modifiers, flags, ZWJ sequences).
_JOINERS = {"\u200d", "\ufe0e", "\ufe0f"}
_SENTENCE_END = re.compile(r"[.!?…。！？][\"'»”’)\]]*(?=\s)")
_FENCE = "```"


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


def split_message(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Split `text` into chunks of at most `limit` UTF-16 units, on the best boundaries.

    Paragraphs first, then lines, sentences, words; a single word longer than the limit
    is cut where no grapheme breaks. Whitespace at the cuts is dropped (a line's indentation
    is kept); no chunk is empty.
    """
    if limit < 2:
        raise ValueError("limit must be at least 2")
    chunks: list[str] = []
    rest = text.strip()
    while rest:
        window = _fits(rest, limit)
        if window == len(rest):
            chunks.append(rest)
            break
        end, start = _best_cut(rest, window)
        chunk = rest[:end].rstrip()
        if chunk:
            chunks.append(chunk)
        # After a line break the next chunk keeps its indentation (code); else no blanks.
        at_line_start = "\n" in rest[end:start]
        rest = rest[start:].lstrip("\r\n") if at_line_start else rest[start:].lstrip()
        if not rest.strip():
            break
    return chunks


_FENCE_OPEN = re.compile(r"```([\w+#.-]*)")


def balance_fences(chunks: list[str]) -> list[str]:
    """Close a Markdown code block a cut left open and reopen it in the next chunk."""
    out: list[str] = []
    reopen: str | None = None
    for chunk in chunks:
        if reopen is not None:
            chunk = f"{reopen}\n{chunk}"
        fences = _FENCE_OPEN.findall(chunk)
        # An odd number of fences leaves the last one open: carry its language over.
        reopen = _FENCE + fences[-1] if len(fences) % 2 == 1 else None
        out.append(f"{chunk}\n{_FENCE}" if reopen is not None else chunk)
    return out


def split_markdown(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Split Markdown so that every chunk is complete Markdown of at most `limit` units."""
    margin = 2 * (len(_FENCE) + 1) + 16  # room for a reopened fence and its language
    return balance_fences(split_message(text, limit - margin))


# --- Markdown (as models write it) to Telegram HTML --------------------------------------

_CODE_BLOCK = re.compile(r"```[ \t]*([\w+#.-]*)[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*", re.DOTALL)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^\s)]+)\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*$", re.MULTILINE)
_SLOT = "\x00{}\x00"
_SLOT_RE = re.compile("\x00(\\d+)\x00")


def _inline(text: str) -> str:
    """Render inline Markdown of a text without code blocks."""
    slots: list[str] = []

    def keep(rendered: str) -> str:
        slots.append(rendered)
        return _SLOT.format(len(slots) - 1)

    text = _INLINE_CODE.sub(lambda m: keep(f"<code>{html.escape(m.group(1))}</code>"), text)
    text = _LINK.sub(
        lambda m: keep(
            f'<a href="{html.escape(m.group(2))}">{html.escape(m.group(1), quote=False)}</a>'
        ),
        text,
    )
    text = html.escape(text, quote=False)
    text = _HEADING.sub(r"<b>\1</b>", text)
    text = _BOLD.sub(r"<b>\1</b>", text)
    text = _STRIKE.sub(r"<s>\1</s>", text)
    return _SLOT_RE.sub(lambda m: slots[int(m.group(1))], text)


def markdown_to_html(text: str) -> str:
    """Render the Markdown models usually write as Telegram HTML.

    Code blocks, inline code, bold, strikethrough, links and headings; anything else stays
    as written, escaped. An unclosed code block runs to the end of the text.
    """
    text = text.replace("\x00", "")
    out: list[str] = []
    pos = 0
    for m in _CODE_BLOCK.finditer(text):
        out.append(_inline(text[pos : m.start()]))
        lang, code = m.group(1), m.group(2).rstrip("\n")
        attr = f' class="language-{html.escape(lang)}"' if lang else ""
        out.append(f"<pre><code{attr}>{html.escape(code, quote=False)}</code></pre>")
        pos = m.end()
    out.append(_inline(text[pos:]))
    return "".join(out)
