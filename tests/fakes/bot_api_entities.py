"""Message entities as the fake Bot API judges them, the way Telegram (TDLib) does.

`entities_problem` words the 400 Telegram answers a message's `entities` with: a list of
MessageEntity objects of known types, offsets and lengths in UTF-16 code units within the
text and not inside a surrogate pair, a link with a target Telegram can open.
`shown_text` is what remains of a text once Telegram trims it (spaces and line breaks at
both ends): a text with nothing left is "message text is empty", whatever its entities.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

ENTITY_TYPES = {
    "mention", "hashtag", "cashtag", "bot_command", "url", "email", "phone_number", "bold",
    "italic", "underline", "strikethrough", "spoiler", "blockquote", "expandable_blockquote",
    "code", "pre", "text_link", "text_mention", "custom_emoji", "date_time",
}  # fmt: skip
MAX_BOUND = 1_000_000  # TDLib's bound on an entity's offset and length
CANT_PARSE = "Bad Request: can't parse MessageEntity: "


def shown_text(text: str) -> str:
    """Return the text Telegram keeps: without spaces and line breaks at either end."""
    return text.strip(" \n")


def _utf16_units(text: str) -> list[int]:
    """Return, per UTF-16 code unit of `text`, the UTF-8 byte offset of its character
    (the second unit of a surrogate pair gets -1: no character starts there)."""
    units: list[int] = []
    byte = 0
    for ch in text:
        units.append(byte)
        if ord(ch) > 0xFFFF:
            units.append(-1)
        byte += len(ch.encode())
    return units


def _url_problem(url: Any) -> str | None:
    if not isinstance(url, str):
        return CANT_PARSE + 'Can\'t find field "url"'
    parts = urlsplit(url if "://" in url or url.startswith(("tg:", "mailto:")) else f"//{url}")
    if parts.scheme in ("tg", "mailto"):
        return None
    if parts.scheme not in ("", "http", "https", "ftp", "tonsite"):
        return f"Bad Request: entity URL '{url}' is invalid: Unsupported URL protocol"
    if not parts.hostname:
        return f"Bad Request: entity URL '{url}' is invalid: URL host is empty"
    if "." not in parts.hostname:
        return f"Bad Request: entity URL '{url}' is invalid: Wrong HTTP URL"
    return None


def _entity_problem(entity: Any, units: list[int]) -> str | None:
    """Return what Telegram says of one entity of a text of `len(units)` UTF-16 units."""
    if not isinstance(entity, dict):
        return CANT_PARSE + "MessageEntity must be an Object"
    for name in ("type", "offset", "length"):
        if name not in entity:
            return CANT_PARSE + f'Can\'t find field "{name}"'
    if entity["type"] not in ENTITY_TYPES:
        return CANT_PARSE + "Unsupported type specified"
    offset, length = entity["offset"], entity["length"]
    for name, value in (("offset", offset), ("length", length)):
        if isinstance(value, bool) or not isinstance(value, int):
            return CANT_PARSE + f'Field "{name}" must be of type Number'
        if not 0 <= value <= MAX_BOUND:
            return f"Bad Request: receive an entity with incorrect {name} {value}"
    if length == 0:
        return None  # Telegram drops it
    end, size = offset + length, len(units)
    if offset > size:
        return f"Bad Request: entity begins after the end of the text at UTF-16 offset {offset}"
    if end > size:
        return (
            f"Bad Request: entity beginning at UTF-16 offset {offset} ends after the end of "
            f"the text at UTF-16 offset {end}"
        )
    if offset < size and units[offset] < 0:
        return (
            "Bad Request: entity begins in a middle of a UTF-16 symbol at byte offset "
            f"{units[offset - 1]}"
        )
    if end < size and units[end] < 0:
        return (
            f"Bad Request: entity beginning at UTF-16 offset {offset} ends in a middle of a "
            f"UTF-16 symbol at byte offset {units[end - 1]}"
        )
    if entity["type"] == "text_link":
        return _url_problem(entity.get("url"))
    if entity["type"] == "pre" and not isinstance(entity.get("language", ""), str):
        return CANT_PARSE + 'Field "language" must be of type String'
    return None


def entities_problem(text: str, entities: Any) -> str | None:
    """Return Telegram's description of what is wrong with a message's `entities`, or None."""
    if not isinstance(entities, list):
        return "Bad Request: can't parse entities JSON object"
    units = _utf16_units(text)
    for entity in entities:
        if (problem := _entity_problem(entity, units)) is not None:
            return problem
    return None


def entities_key(entities: Any) -> tuple[tuple[Any, ...], ...]:
    """Return the formatting of a message as "message is not modified" compares it."""
    if not isinstance(entities, list):
        return ()
    return tuple(
        sorted(
            (e["type"], e["offset"], e["length"], e.get("url"), e.get("language"))
            for e in entities
            if e.get("length")
        )
    )
