"""Reply markup and message content as the fake Bot API judges them, the way Telegram does.

`markup_problem` words the 400 Telegram answers a malformed `reply_markup` with;
`inline_markup` is the inline keyboard a message keeps (None when it has none: an empty
keyboard removes it); `content_key` is what "message is not modified" compares, so an
edit that only changes the keyboard, or only the formatting, is a change.
"""

from __future__ import annotations

import html
import re
from typing import Any

from tests.fakes.bot_api_entities import entities_key

# The fields of an InlineKeyboardButton that make it do something; a button needs one.
BUTTON_ACTIONS = (
    "callback_data", "url", "web_app", "login_url", "switch_inline_query",
    "switch_inline_query_current_chat", "switch_inline_query_chosen_chat", "copy_text",
    "callback_game", "pay",
)  # fmt: skip
MAX_CALLBACK_DATA = 64  # bytes
REPLY_KEYBOARDS = ("keyboard", "remove_keyboard", "force_reply")
CANT_PARSE_MARKUP = "Bad Request: can't parse reply keyboard markup JSON object"
CANT_PARSE_BUTTON = "Bad Request: can't parse inline keyboard button: "
_TAG = re.compile(r"<[^>]+>")


def visible_text(text: str, parse_mode: str | None) -> str:
    """Return the text a user sees once Telegram has parsed the formatting out."""
    return html.unescape(_TAG.sub("", text)) if parse_mode == "HTML" else text


def content_key(
    text: str, parse_mode: str | None, entities: Any = None
) -> tuple[str, tuple[Any, ...]]:
    """Return what Telegram compares for "not modified": the visible text and its markup
    (HTML tags, or the `entities` sent with the text)."""
    if parse_mode == "HTML":
        return visible_text(text, parse_mode), tuple(_TAG.findall(text))
    return visible_text(text, parse_mode), entities_key(entities)


def inline_markup(markup: Any) -> dict[str, Any] | None:
    """Return the inline keyboard a message keeps from a valid `reply_markup`, or None."""
    if isinstance(markup, dict) and markup.get("inline_keyboard"):
        return {"inline_keyboard": markup["inline_keyboard"]}
    return None


def markup_problem(markup: Any, inline_only: bool) -> str | None:
    """Return Telegram's description of what is wrong with a `reply_markup`, or None.

    Edits (`inline_only`) take an inline keyboard only; sends also take reply keyboards.
    """
    if not isinstance(markup, dict):
        return CANT_PARSE_MARKUP
    if "inline_keyboard" not in markup:
        if not any(k in markup for k in REPLY_KEYBOARDS):
            return CANT_PARSE_MARKUP
        return "Bad Request: inline keyboard expected" if inline_only else None
    rows = markup["inline_keyboard"]
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        return CANT_PARSE_MARKUP
    for button in (button for row in rows for button in row):
        problem = _button_problem(button)
        if problem is not None:
            return problem
    return None


def _button_problem(button: Any) -> str | None:
    """Return what is wrong with one InlineKeyboardButton, or None."""
    if not isinstance(button, dict):
        return CANT_PARSE_BUTTON + "InlineKeyboardButton must be an Object"
    if "text" not in button:
        return CANT_PARSE_BUTTON + 'Can\'t find field "text"'
    if not isinstance(button["text"], str):
        return CANT_PARSE_BUTTON + 'Field "text" must be of type String'
    if not any(button.get(field) not in (None, "") for field in BUTTON_ACTIONS):
        return CANT_PARSE_BUTTON + "Text buttons are unallowed in the inline keyboard"
    data = button.get("callback_data")
    if data is not None and len(str(data).encode()) > MAX_CALLBACK_DATA:
        return "Bad Request: BUTTON_DATA_INVALID"
    return None


def callback_data_of(markup: dict[str, Any] | None) -> list[str]:
    """Return the callback_data of every button of an inline keyboard."""
    rows = (markup or {}).get("inline_keyboard") or []
    return [str(b["callback_data"]) for row in rows for b in row if "callback_data" in b]
