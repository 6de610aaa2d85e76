"""Private chats and groups: whether a message is for the bot, whose memory it uses, its text."""

from __future__ import annotations

import re

from telegram import Message, MessageEntity, Update, User
from telegram.constants import ChatType

from src.services.agent_service import Identity


def is_private(message: Message) -> bool:
    """Tell whether the message comes from a private chat."""
    return message.chat.type == ChatType.PRIVATE


CHAT_TYPES = frozenset({ChatType.PRIVATE, ChatType.GROUP, ChatType.SUPERGROUP, ChatType.CHANNEL})


def broken_invariant(update: Update) -> str | None:
    """Return how an update breaks Telegram's invariants, or None when it keeps them.

    Telegram never sends such an update; a forger acting as another user does (with the
    webhook's secret, or through a proxy): a private chat's id is its user's (positive, the
    sender's own), a group's, supergroup's or channel's is negative, users' ids are
    positive, and a group's upgrade names groups. The reason never quotes the message.
    """
    query = update.callback_query
    sender: User | None
    if query is not None:
        message, sender = query.message, query.from_user
    else:
        message = (
            update.message
            or update.edited_message
            or update.channel_post
            or update.edited_channel_post
        )
        sender = message.from_user if isinstance(message, Message) else None
    if message is None:
        return None
    chat = message.chat
    # Named in the log: only a type Telegram knows, never a string the update made up.
    kind = chat.type if chat.type in CHAT_TYPES else "unknown"
    if sender is not None and sender.id <= 0:
        return "a sender whose id is not positive"
    if chat.type == ChatType.PRIVATE:
        if chat.id <= 0:
            return "a private chat whose id is not positive"
        if sender is None or sender.id != chat.id:
            return "a private chat that is not its sender's"
    elif chat.id >= 0:
        return f"a {kind} chat whose id is not negative"
    if not isinstance(message, Message):
        return None  # an inaccessible message under a button: its chat is all there is
    if message.sender_chat is not None and message.sender_chat.id >= 0:
        return "a sender chat whose id is not negative"
    # A basic group's upgrade is told in the group (`migrate_to_chat_id`) and in the new
    # supergroup (`migrate_from_chat_id`): both ids are groups'.
    moved_to, moved_from = message.migrate_to_chat_id, message.migrate_from_chat_id
    if moved_to is not None and (chat.type != ChatType.GROUP or moved_to >= 0):
        return f"an upgrade to chat {moved_to} told in a {kind} chat"
    if moved_from is not None and (chat.type != ChatType.SUPERGROUP or moved_from >= 0):
        return f"an upgrade from chat {moved_from} told in a {kind} chat"
    return None


def is_anonymous_admin(message: Message) -> bool:
    """Tell whether a group's administrator wrote anonymously, as the group itself."""
    return message.sender_chat is not None and message.sender_chat.id == message.chat.id


def _mention_pattern(username: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w@])@{re.escape(username)}\b", re.IGNORECASE)


def _mentions_bot(message: Message, username: str, bot_id: int) -> bool:
    """Tell whether the text or caption mentions the bot (by @username or by link)."""
    text = message.text or message.caption or ""
    entities = message.entities or message.caption_entities or ()
    for entity in entities:
        if entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == bot_id:
            return True
    return bool(username) and _mention_pattern(username).search(text) is not None


def command_target(message: Message) -> str | None:
    """Return the bot a leading /command names (`/cmd@name` -> "name"), "" if none, else None."""
    entity = next(iter(message.entities or ()), None)
    if entity is None or entity.type != MessageEntity.BOT_COMMAND or entity.offset != 0:
        return None
    return message.parse_entity(entity).partition("@")[2]


def command_name(message: Message) -> str | None:
    """Return the leading /command's name without its `@bot` part (lower case), or None."""
    entity = next(iter(message.entities or ()), None)
    if entity is None or entity.type != MessageEntity.BOT_COMMAND or entity.offset != 0:
        return None
    return message.parse_entity(entity).lstrip("/").partition("@")[0].lower()


def is_addressed(message: Message, username: str, bot_id: int) -> bool:
    """Tell whether the bot should react: private chat, a mention, a reply to it, a command."""
    if is_private(message):
        return True
    replied = message.reply_to_message
    if replied is not None and replied.from_user is not None and replied.from_user.id == bot_id:
        # A forum topic's messages all "reply" to its first message; that is not a reply.
        if not (message.is_topic_message and replied.forum_topic_created is not None):
            return True
    target = command_target(message)
    if target is not None:
        return target == "" or target.lower() == username.lower()
    return _mentions_bot(message, username, bot_id)


def topic_of(message: Message) -> int:
    """Return the topic whose conversation the message belongs to: its thread in a forum
    or a private chat with topics, 0 for the General topic and chats without topics (a
    reply thread of an ordinary group is no topic)."""
    return (message.message_thread_id or 0) if message.is_topic_message else 0


def identity_of(message: Message) -> Identity:
    """Return whose memory the message uses: the user in private, the chat in groups
    (with the member who wrote it), in the message's topic."""
    user = message.from_user
    language = user.language_code if user else None
    topic = topic_of(message)
    if is_private(message) and user is not None:
        return Identity(user.id, user.username, user.first_name, language, user.id, topic)
    chat = message.chat
    sender = user.id if user is not None else None
    return Identity(chat.id, chat.username, chat.title, language, sender, topic, member_of(message))


def member_of(message: Message) -> int:
    """Return the group member who wrote the message, by the user id the update carries
    (`from.id`): their facts are theirs. 0 in a private chat and for a message the group
    or a channel sends as itself (`sender_chat`: an anonymous administrator), whose facts
    are the group's."""
    user = message.from_user
    if is_private(message) or message.sender_chat is not None or user is None:
        return 0
    return user.id


def author_name(message: Message) -> str:
    """Return how the author is called in a group conversation."""
    user = message.from_user
    if message.sender_chat is not None:
        return message.sender_chat.title or message.sender_chat.username or "?"
    if user is None:
        return "?"
    return user.first_name or (f"@{user.username}" if user.username else str(user.id))


def turn_text(message: Message, username: str) -> str:
    """Return the text a message hands to the model: text or caption, mention removed."""
    text = message.text or message.caption or ""
    if is_private(message) or not username:
        return text.strip()
    return _mention_pattern(username).sub("", text).strip()


def group_turn_text(message: Message, text: str) -> str:
    """Prefix a group message with its author, so the model can tell speakers apart."""
    if is_private(message):
        return text
    return f"{author_name(message)}: {text}"


def migration_of(update: Update) -> tuple[int, int] | None:
    """Return (old, new) chat ids if the update announces a group's upgrade to a
    supergroup (Telegram says it in both chats), else None."""
    message = update.message
    if message is None:
        return None
    if message.migrate_to_chat_id is not None:
        return message.chat_id, message.migrate_to_chat_id
    if message.migrate_from_chat_id is not None:
        return message.migrate_from_chat_id, message.chat_id
    return None
