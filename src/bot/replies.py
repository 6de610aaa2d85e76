"""A reply carries what it answers: the replied-to message's text, and the fragment the user
quoted from it, go with the question as part of the user's message (quoted material, never
an instruction), each cut to a few hundred characters."""

from __future__ import annotations

from telegram import Message

from src.bot.chats import author_name, group_turn_text
from src.graph.context.budget import shorten

# Enough for the gist of a message and a sentence or two quoted from it; the whole of a
# long message is in the history (or is someone else's and not the user's to store twice).
REPLIED_CHARS = 1000
QUOTE_CHARS = 500
# What a replied-to message without text holds, in the words of the media labels.
KINDS = (
    ("photo", "a photo"),
    ("voice", "a voice message"),
    ("audio", "an audio file"),
    ("video", "a video"),
    ("document", "a document"),
    ("sticker", "a sticker"),
)


def said_text(message: Message, text: str, bot_id: int, limit: int) -> str:
    """Return the message's text as stored: its author in a group, and what it replies to
    before the text, unless that would take it over `limit` characters."""
    said = group_turn_text(message, text)
    context = reply_context(message, bot_id)
    if not context:
        return said
    pointed = group_turn_text(message, f"{context}\n{text}")
    return pointed if len(pointed) <= limit else said


def reply_context(message: Message, bot_id: int) -> str:
    """Return the labels of what the message replies to and quotes ("" for neither)."""
    lines = []
    replied = message.reply_to_message
    # A forum topic's messages all "reply" to the topic's first message: not a reply.
    if replied is not None and replied.forum_topic_created is None:
        lines.append(f"[In reply to {_whose(replied, bot_id)}: {_content(replied)}]")
    quote = message.quote.text if message.quote is not None else ""
    if quote.strip():
        lines.append(f'[Quoting: "{shorten(quote, QUOTE_CHARS)}"]')
    return "\n".join(lines)


def _whose(replied: Message, bot_id: int) -> str:
    user = replied.from_user
    if user is not None and user.id == bot_id:
        return "your message"
    return author_name(replied)


def _content(replied: Message) -> str:
    text = replied.text or replied.caption or ""
    if text.strip():
        return f'"{shorten(text, REPLIED_CHARS)}"'
    return next((label for kind, label in KINDS if getattr(replied, kind)), "a message")
