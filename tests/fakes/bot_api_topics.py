"""Topics for the fake Bot API: forum supergroups and private chats with topics.

A forum supergroup (`open_forum`) is a supergroup whose chat has `is_forum`; a private
chat has topics once the bot's topic mode is on (`private_topics = True`: getMe then says
`has_topics_enabled`, Bot API 9.3). `create_topic` opens a topic as a user would (its id
is the id of its `forum_topic_created` service message, as on Telegram) and
`createForumTopic` lets the bot open one where the chat allows it. A user message pushed
with `topic=N` carries `message_thread_id` and `is_topic_message`, and in a forum replies
to the topic's service message like every message of a topic. `push_topic_event` queues
`forum_topic_closed` / `forum_topic_reopened` service messages. `delete_topic` deletes a
topic as a user would: Telegram sends bots no update for that, and every later send into
it answers 400 "Bad Request: message thread not found".

As Telegram does, a `message_thread_id` the bot sends with is checked: a chat without
topics, or a topic the chat never had, answers 400 "Bad Request: message thread not
found"; a closed topic 400 "Bad Request: TOPIC_CLOSED" unless the bot administers the
chat. A message the bot sends into a topic carries its `message_thread_id`.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from collections.abc import Callable

THREAD_NOT_FOUND = "Bad Request: message thread not found"
TOPIC_CLOSED = "Bad Request: TOPIC_CLOSED"
NOT_A_FORUM = "Bad Request: the chat is not a forum"
TOPIC_NAME_CHARS = 128


def _fail(description: str) -> web.Response:
    body = {"ok": False, "error_code": 400, "description": description}
    return web.json_response(body, status=400)


class ForumTopics:
    """The topic part of FakeBotAPI (a mixin: it uses the server's lock and chats)."""

    if TYPE_CHECKING:
        _lock: threading.RLock
        _chats: dict[Any, dict[str, Any]]
        _members: dict[Any, dict[int, str]]
        _bot_messages: dict[tuple[Any, int], dict[str, Any]]
        _message_ids: itertools.count[int]
        bot_user: dict[str, Any]
        push_update: Callable[[dict[str, Any]], int]
        _chat: Callable[[Any], dict[str, Any]]

    def _init_topics(self) -> None:
        self._forums: set[int] = set()
        self._topics: dict[int, dict[int, dict[str, Any]]] = {}
        """chat id -> thread id -> the topic (name, closed)."""
        self.created_topics: list[dict[str, Any]] = []
        """Topics the bot created with createForumTopic."""
        self.private_topics = False

    def _reset_topics(self) -> None:
        with self._lock:
            self._forums.clear()
            self._topics.clear()
            self.created_topics.clear()
            self.private_topics = False

    @property
    def private_topics(self) -> bool:
        """Whether the bot's private chats have topics (getMe's `has_topics_enabled`)."""
        return bool(self.bot_user.get("has_topics_enabled"))

    @private_topics.setter
    def private_topics(self, on: bool) -> None:
        self.bot_user["has_topics_enabled"] = on
        self.bot_user["allows_users_to_create_topics"] = on

    def open_forum(self, chat_id: int, title: str = "Test forum") -> None:
        """Make `chat_id` a forum supergroup."""
        if chat_id >= 0:
            raise ValueError("a forum is a supergroup: its id is negative")
        with self._lock:
            self._forums.add(chat_id)
            self._chats[chat_id] = {"id": chat_id, "type": "supergroup", "title": title}
            self._chats[chat_id]["is_forum"] = True

    def has_topics(self, chat: dict[str, Any]) -> bool:
        """Tell whether the chat has topics: a forum, or a private chat in topic mode."""
        if chat["type"] == "private":
            return self.private_topics
        return chat["type"] == "supergroup" and chat["id"] in self._forums

    def create_topic(self, chat_id: int, name: str) -> int:
        """Open a topic in a chat with topics (as a user would); return its thread id."""
        chat = self._chat(chat_id)
        if not self.has_topics(chat):
            raise ValueError(f"chat {chat_id} has no topics")
        with self._lock:
            thread = next(self._message_ids)
            self._topics.setdefault(chat["id"], {})[thread] = {"name": name, "closed": False}
        return thread

    def delete_topic(self, chat_id: int, thread: int) -> None:
        """Delete a topic (as a user would): no update is sent; sends into it fail."""
        with self._lock:
            if self._topics.get(chat_id, {}).pop(thread, None) is None:
                raise ValueError(f"chat {chat_id} has no topic {thread}")

    def topic(self, chat_id: int, thread: int) -> dict[str, Any] | None:
        """Return the topic (name, closed) of a chat, or None."""
        with self._lock:
            return self._topics.get(chat_id, {}).get(thread)

    def _topic_chat(self, chat: dict[str, Any]) -> None:
        """Mark a user message's chat as Telegram shows it (a forum has `is_forum`)."""
        if chat["type"] == "supergroup" and chat["id"] in self._forums:
            chat["is_forum"] = True

    def _topic_fields(self, message: dict[str, Any], topic: int | None) -> None:
        """Put a user message into topic `topic` of its chat (None: no topic)."""
        if topic is None:
            return
        chat = message["chat"]
        found = self.topic(chat["id"], topic)
        if not self.has_topics(chat) or found is None:
            raise ValueError(f"chat {chat['id']} has no topic {topic}")
        message |= {"message_thread_id": topic, "is_topic_message": True}
        if chat["type"] != "private" and "reply_to_message" not in message:
            created = {"name": found["name"], "icon_color": 7322096}
            message["reply_to_message"] = {
                "message_id": topic,
                "date": message["date"],
                "chat": chat,
                "from": message["from"],
                "message_thread_id": topic,
                "forum_topic_created": created,
            }

    def push_topic_event(self, user_id: int, chat_id: int, thread: int, event: str) -> int:
        """Queue a topic's service message: "forum_topic_closed" or "forum_topic_reopened"
        (which also closes or reopens it here)."""
        if event not in ("forum_topic_closed", "forum_topic_reopened"):
            raise ValueError(f"unknown topic event {event!r}")
        chat = self._chat(chat_id)
        with self._lock:
            found = self._topics.get(chat["id"], {}).get(thread)
            if found is None:
                raise ValueError(f"chat {chat_id} has no topic {thread}")
            found["closed"] = event == "forum_topic_closed"
            message_id = next(self._message_ids)
        user = {"id": user_id, "is_bot": False, "first_name": "Test"}
        message = {"message_id": message_id, "date": int(time.time()), "chat": chat}
        message |= {"from": user, "message_thread_id": thread, "is_topic_message": True}
        message[event] = {}
        return self.push_update({"message": message})

    def thread_problem(self, chat_id: Any, params: dict[str, Any]) -> web.Response | None:
        """Return the 400 Telegram answers to a send with this `message_thread_id`."""
        raw = params.get("message_thread_id")
        if raw in (None, "", 0, "0"):
            return None
        chat = self._chat(chat_id)
        found = self.topic(chat["id"], int(raw)) if self.has_topics(chat) else None
        if found is None:
            return _fail(THREAD_NOT_FOUND)
        admin = self._members.get(chat["id"], {}).get(self.bot_user["id"])
        if found["closed"] and admin not in ("administrator", "creator"):
            return _fail(TOPIC_CLOSED)
        return None

    def _in_thread(self, message: dict[str, Any], params: dict[str, Any]) -> None:
        """Mark a message the bot sent into a topic as Telegram returns and keeps it."""
        raw = params.get("message_thread_id")
        if raw in (None, "", 0, "0"):
            return
        fields = {"message_thread_id": int(raw), "is_topic_message": True}
        message |= fields
        with self._lock:
            kept = self._bot_messages.get((message["chat"]["id"], message["message_id"]))
            if kept is not None:
                kept |= fields

    async def _m_createforumtopic(self, params: dict[str, Any]) -> Any:
        chat = self._chat(params.get("chat_id"))
        name = str(params.get("name") or "")
        if not 1 <= len(name) <= TOPIC_NAME_CHARS:
            return _fail(f"Bad Request: {'TOPIC_TOO_LONG' if name else 'TOPIC_TITLE_EMPTY'}")
        if not self.has_topics(chat):
            return _fail(NOT_A_FORUM)
        if chat["type"] != "private":
            status = self._members.get(chat["id"], {}).get(self.bot_user["id"])
            if status not in ("administrator", "creator"):
                return _fail("Bad Request: not enough rights to create a topic")
        thread = self.create_topic(chat["id"], name)
        topic = {"message_thread_id": thread, "name": name, "icon_color": 7322096}
        with self._lock:
            self.created_topics.append(topic | {"chat_id": chat["id"]})
        return topic
