"""A fake Telegram Bot API server for tests, driven by real python-telegram-bot clients.

It runs aiohttp in its own thread on 127.0.0.1 (see `BackgroundAiohttpServer`). Point PTB
at it with `base_url=srv.base_url` (and `base_file_url=srv.base_file_url` for downloads).
Routes are `/bot<TOKEN>/<method>`; bodies may be JSON, url-encoded (what PTB 22 sends: each
non-string value JSON-encoded) or multipart. Tests push updates with `push_*` helpers and
inspect what the bot did via `sent`, `actions` and `calls`.

Files: every file a message carries is kept in `files` (a `FileStore`), with its bytes:
`add_file(data, prefix)` stores one and returns its `file_id`/`file_unique_id`/`file_size`;
the `push_*` helpers store what they are given (`push_voice`, `push_audio`, `push_photo`,
`push_document`, `push_album`), or placeholder bytes (b"fake-file:<file_id>") without
`data`; files the bot sends get placeholders too. `getFile` answers as Telegram does: 400
"Bad Request: invalid file_id" for an id it never gave out, 400 "Bad Request: file is too
big" over `download_limit` (20 MB), else the File with a `file_path` such as
"voice/file_3.oga", "photos/file_4.jpg" or "documents/file_5.pdf". The download route
`/file/bot<TOKEN>/<file_path>` answers 401 for a wrong token and 404 for a path it never
gave out; each successful download's file_id is recorded in `downloads`, and
`fail_downloads_next` fails the next downloads. A photo pushed with `data` comes as
Telegram sends it: smaller JPEG sizes shrunk from it first, the image itself (its real
width and height) last. An album is consecutive messages sharing a new `media_group_id`,
the caption on the first. Captions get `caption_entities` like texts get `entities`. A
message pushed with `reply_to=<message_id>` carries that message of the chat (a user's or the
bot's, without its own reply) as `reply_to_message`, and with `quote="..."` a manual `quote`
(TextQuote, UTF-16 `position`) of a part of its text; a quote not in that text is refused.

Chat members: whoever wrote in a chat is a "member" of it; `set_member` (or
`set_chat_admins`) gives anyone another status until `reset`; `getChatMember` answers as
Telegram does, with a ChatMember object, or 400 "chat not found"/"user not found" for ids
it never saw.

Recording semantics: `calls` holds every method call (including failed ones); `sent` holds
only successful sendMessage/editMessageText/send<Media> calls, i.e. what the user saw.
Accepted drafts go to `drafts`, keyboard-only edits to `markup_edits`, deletions to `deleted`
and answers to button presses to `callback_answers`; none of them is in `sent`.

Drafts (`sendMessageDraft`, Bot API 9.3; optional text since 10.0, which PTB 22.8 speaks):
private chats only (a group gets 400 "TEXTDRAFT_PEER_INVALID"), a non-zero integer
`draft_id` (else 400 "RANDOM_ID_INVALID", as Telegram's servers call it), at most 4096
characters after formatting; an empty text is the "Thinking..." placeholder. With
`drafts_supported = False` the method is unknown (404), like an older self-hosted server.

Command menus: kept per scope and language, validated as Telegram does (see
`tests.fakes.bot_api_commands`); `menu(chat_id, user_id, language_code)` is the list a user
sees in that chat, found through Telegram's order of scopes.

Groups upgraded to supergroups: `migrate_group(old, new)` makes every chat method aimed at
the old group's id answer as Telegram does, 400 "Bad Request: group chat was upgraded to a
supergroup chat" with `parameters.migrate_to_chat_id` (PTB raises ChatMigrated), and with
`announce` pushes the two service messages Telegram sends: `migrate_to_chat_id` in the old
group, `migrate_from_chat_id` in the new supergroup.

Formatting: a text comes with `parse_mode` "HTML" or with `entities`, which are checked as
Telegram checks them (`tests.fakes.bot_api_entities`: known types, offsets and lengths in
UTF-16 code units inside the text, links Telegram can open); a text that is blank once
Telegram trims it is 400 "message text is empty", whatever its entities, and one over 4096
characters is "message is too long". `reject_parse_mode` refuses every formatted text (a
`parse_mode` or `entities`) as Telegram refuses broken formatting.

Inline keyboards: a bot message keeps the inline keyboard it was sent or last edited with;
editMessageText without `reply_markup` removes it, as on Telegram, and "message is not
modified" compares the text (with its formatting) and the keyboard. `push_callback` presses
a button that is there; `answerCallbackQuery` answers each query once. The checks of
`reply_markup` are in `tests.fakes.bot_api_markup`.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import re
import threading
import time
import zlib
from collections import deque
from typing import Any

from aiohttp import web

from tests.fakes.bot_api_commands import commands_problem, menu_for, menu_key, scope_of
from tests.fakes.bot_api_entities import entities_problem, shown_text
from tests.fakes.bot_api_files import FileStore, guess_mime
from tests.fakes.bot_api_markup import (
    callback_data_of,
    content_key,
    inline_markup,
    markup_problem,
    visible_text,
)
from tests.fakes.bot_api_topics import ForumTopics
from tests.fakes.images import downscale_jpeg, image_info
from tests.fakes.openai_server import BackgroundAiohttpServer

SEND_METHODS = {"sendmessage", "sendphoto", "senddocument", "sendvoice", "sendsticker"}
CHAT_METHODS = SEND_METHODS | {
    "editmessagetext", "editmessagereplymarkup", "deletemessage", "sendchataction",
    "sendmessagedraft",
}  # fmt: skip
TRUE_METHODS = {
    "setwebhook", "deletewebhook", "setmycommands", "deletemycommands", "close", "logout",
    "setmessagereaction", "setmydescription", "setmyshortdescription", "setchatmenubutton",
}  # fmt: skip
STRING_FIELDS = {
    "text", "caption", "parse_mode", "action", "callback_query_id", "url", "secret_token",
    "file_id", "description", "short_description", "language_code", "inline_message_id",
}  # fmt: skip
ERROR_TEXT = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden: bot was blocked by the user",
    409: "Conflict",
    429: "Too Many Requests",
    500: "Internal Server Error",
}
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)
MIGRATED = "Bad Request: group chat was upgraded to a supergroup chat"
QUERY_INVALID = "Bad Request: query is too old and response timeout expired or query ID is invalid"
MAX_CALLBACK_ANSWER = 200  # characters of an answerCallbackQuery text
# ChatMember.status values, and the fields Telegram sends with each beyond `status`/`user`.
ADMIN_RIGHTS = (
    "can_manage_chat", "can_delete_messages", "can_manage_video_chats", "can_restrict_members",
    "can_change_info", "can_invite_users", "can_post_stories", "can_edit_stories",
    "can_delete_stories", "can_pin_messages", "can_manage_topics",
)  # fmt: skip
MEMBER_PERMISSIONS = (
    "can_send_messages", "can_send_audios", "can_send_documents", "can_send_photos",
    "can_send_videos", "can_send_video_notes", "can_send_voice_notes", "can_send_polls",
    "can_send_other_messages", "can_add_web_page_previews", "can_change_info",
    "can_invite_users", "can_pin_messages", "can_manage_topics", "can_edit_tag",
    "can_react_to_messages",
)  # fmt: skip
MEMBER_FIELDS: dict[str, dict[str, Any]] = {
    "creator": {"is_anonymous": False},
    "administrator": {"can_be_edited": False, "is_anonymous": False, "can_promote_members": False}
    | dict.fromkeys(ADMIN_RIGHTS, True),
    "member": {},
    "restricted": {"is_member": True, "until_date": 0} | dict.fromkeys(MEMBER_PERMISSIONS, False),
    "left": {},
    "kicked": {"until_date": 0},
}
DOWNLOAD_LIMIT = 20 * 1024 * 1024  # the largest file getFile hands out to a bot
THUMBNAIL_SIDES = (90, 320, 800)  # the smaller sizes of a photo, as Telegram makes them
COMMAND_OR_MENTION = re.compile(r"(?<!\S)(/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?|@[A-Za-z0-9_]{5,32})")


def utf16_len(text: str) -> int:
    """Return the length of `text` in UTF-16 code units, as Telegram counts offsets."""
    return len(text.encode("utf-16-le")) // 2


def compute_entities(text: str) -> list[dict[str, Any]]:
    """Return bot_command and mention entities for `text`, with UTF-16 offsets."""
    return [
        {
            "type": "bot_command" if m.group(1).startswith("/") else "mention",
            "offset": utf16_len(text[: m.start(1)]),
            "length": utf16_len(m.group(1)),
        }
        for m in COMMAND_OR_MENTION.finditer(text)
    ]


def _decode(name: str, value: str) -> Any:
    """Decode one form field the way PTB encodes it (non-strings as JSON)."""
    if name in STRING_FIELDS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _int(value: Any) -> int:
    """Read an integer parameter as the Bot API server does: anything else is 0."""
    if isinstance(value, bool):
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _as_chat_id(value: Any) -> int | str | None:
    """Normalize a chat_id parameter to int where possible."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


class FakeBotAPI(ForumTopics, BackgroundAiohttpServer):
    """A scripted, thread-safe Telegram Bot API; see the module docstring."""

    def __init__(
        self,
        token: str = "123456:TEST-TOKEN",
        username: str = "tgagent_test_bot",
        bot_id: int = 999,
        first_name: str = "TGAgent Test",
        host: str = "127.0.0.1",
        port: int = 0,
        max_poll_timeout: float = 1.0,
    ) -> None:
        super().__init__(host, port)
        self.token = token
        self.bot_user: dict[str, Any] = {"id": bot_id, "is_bot": True, "first_name": first_name}
        self.bot_user |= {"username": username, "can_join_groups": True}
        self.max_poll_timeout = max_poll_timeout
        self.max_message_length = 4096
        self.reject_parse_mode = False
        self.delay = 0.0
        self.webhook_url = ""
        self.drafts_supported = True
        self.updates: list[dict[str, Any]] = []
        self.pushed: list[dict[str, Any]] = []
        """A copy of every update queued, to deliver one again as Telegram may."""
        self.sent: list[dict[str, Any]] = []
        self.drafts: list[dict[str, Any]] = []
        self.markup_edits: list[dict[str, Any]] = []
        self.deleted: list[dict[str, Any]] = []
        self.callback_answers: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self.commands: dict[str, Any] = {}
        self.files = FileStore()
        self.download_limit = DOWNLOAD_LIMIT
        self.downloads: list[str] = []
        self._download_faults: deque[int] = deque()
        self._media_groups = itertools.count(1)
        self.blocked: set[int | str] = set()
        self._faults: dict[str, deque[dict[str, Any]]] = {}
        # The bot's messages as Telegram holds them now, and what "not modified" compares.
        self._bot_messages: dict[tuple[Any, int], dict[str, Any]] = {}
        self._contents: dict[tuple[Any, int], tuple[Any, ...]] = {}
        self._user_messages: set[tuple[Any, int]] = set()
        self._posted: dict[tuple[Any, int], dict[str, Any]] = {}  # users' messages, to reply to
        self._open_queries: dict[str, dict[str, Any]] = {}  # id -> callback query, unanswered
        self._chats: dict[Any, dict[str, Any]] = {}
        self._users: dict[int, dict[str, Any]] = {bot_id: self.bot_user}
        self._writers: set[tuple[Any, int]] = set()  # (chat, user): wrote there, a member
        self._members: dict[Any, dict[int, str]] = {}  # statuses tests set
        self._last_message: dict[Any, int] = {}
        self._migrated: dict[Any, int] = {}  # old group id -> its supergroup's id
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1)
        self._query_ids = itertools.count(1)
        self._changed = threading.Condition(self._lock)
        self._wakeup: asyncio.Event | None = None
        self._init_topics()  # forum supergroups, private chats with topics

    @property
    def base_url(self) -> str:
        """Return the URL to pass as PTB `base_url` (the token is appended by PTB)."""
        return f"http://{self.host}:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        """Return the URL to pass as PTB `base_file_url`."""
        return f"http://{self.host}:{self.port}/file/bot"

    # ----- fault injection -------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        n: int = 1,
        error_code: int = 429,
        description: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        """Answer the next n calls of `method` ("*" for any) with an error."""
        if error_code == 429 and retry_after is None:
            retry_after = 1
        if description is None:
            description = ERROR_TEXT.get(error_code, "Error")
            if retry_after:
                description = f"Too Many Requests: retry after {retry_after}"
        fault = {"error_code": error_code, "description": description, "retry_after": retry_after}
        with self._lock:
            self._faults.setdefault(method.lower(), deque()).extend([fault] * n)

    def fail_downloads_next(self, n: int = 1, status: int = 500) -> None:
        """Answer the next n downloads of files that exist with an HTTP error."""
        with self._lock:
            self._download_faults.extend([status] * n)

    def block_user(self, chat_id: int | str) -> None:
        """Make every call targeting `chat_id` answer 403 Forbidden."""
        with self._lock:
            self.blocked.add(_as_chat_id(chat_id))

    def unblock_user(self, chat_id: int | str) -> None:
        """Undo `block_user`."""
        with self._lock:
            self.blocked.discard(_as_chat_id(chat_id))

    # ----- inspection --------------------------------------------------------------------

    def messages_to(self, chat_id: int | str) -> list[dict[str, Any]]:
        """Return the successfully sent/edited messages for one chat, in order."""
        with self._lock:
            return [m for m in self.sent if m["chat_id"] == _as_chat_id(chat_id)]

    def texts_to(self, chat_id: int | str) -> list[str]:
        """Return just the texts of `messages_to(chat_id)`."""
        return [m["text"] for m in self.messages_to(chat_id)]

    def drafts_to(self, chat_id: int | str) -> list[dict[str, Any]]:
        """Return the drafts accepted for one chat, in order."""
        with self._lock:
            return [d for d in self.drafts if d["chat_id"] == _as_chat_id(chat_id)]

    def bot_message(self, chat_id: int | str, message_id: int) -> dict[str, Any] | None:
        """Return the bot's message as Telegram holds it now (None: unknown or deleted)."""
        with self._lock:
            message = self._bot_messages.get((self._chat(_as_chat_id(chat_id))["id"], message_id))
            return copy.deepcopy(message)

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        """Return the recorded calls of one method (case-insensitive)."""
        with self._lock:
            return [c for c in self.calls if c["method"].lower() == method.lower()]

    def wait_for_messages(
        self, chat_id: int | str, count: int, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Block until `count` messages went to `chat_id`; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(found := self.messages_to(chat_id)) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(found)}/{count} messages to {chat_id}: {found}")
                self._changed.wait(left)
            return found

    async def await_messages(
        self, chat_id: int | str, count: int, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Wait without blocking the caller's loop until `count` messages went to `chat_id`."""
        deadline = time.monotonic() + timeout
        while len(found := self.messages_to(chat_id)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(found)}/{count} messages to {chat_id}: {found}")
            await asyncio.sleep(0.01)
        return found

    def clear(self) -> None:
        """Forget recorded calls, messages, drafts, edits, deletions, callback queries and
        answers, actions, downloads, pending updates and faults."""
        with self._lock:
            for items in (
                self.sent, self.drafts, self.markup_edits, self.deleted, self.callback_answers,
                self.actions, self.calls, self.updates, self.pushed, self.downloads,
            ):  # fmt: skip
                items.clear()
            self._download_faults.clear()
            self._open_queries.clear()
            self._faults.clear()
            self.blocked.clear()

    def reset(self) -> None:
        """Clear everything, forget the files and restore delay, parse-mode, drafts, webhook,
        download limit and command settings."""
        with self._lock:
            self.clear()
            self.reject_parse_mode = False
            self.drafts_supported = True
            self.delay = 0.0
            self.webhook_url = ""
            self.commands.clear()
            self.files.clear()
            self._posted.clear()
            self._reset_topics()
            self.download_limit = DOWNLOAD_LIMIT
            self._members.clear()
            self._migrated.clear()

    # ----- chat members ------------------------------------------------------------------

    def set_member(
        self, chat_id: int, user_id: int, status: str = "member", first_name: str = "Test"
    ) -> None:
        """Give a user a status in a chat ("creator", "administrator", "member", "left"...).

        A chat or user never seen before becomes known: a supergroup, a user named
        `first_name`.
        """
        if status not in MEMBER_FIELDS:
            raise ValueError(f"unknown chat member status {status!r}")
        with self._lock:
            if chat_id not in self._chats:
                if chat_id >= 0:
                    raise ValueError("a private chat's members are its user and the bot")
                self._chats[chat_id] = {"id": chat_id, "type": "supergroup", "title": "Test group"}
            self._users.setdefault(
                user_id, {"id": user_id, "is_bot": False, "first_name": first_name}
            )
            self._members.setdefault(chat_id, {})[user_id] = status

    def set_chat_admins(self, chat_id: int, *admins: int, creator: int | None = None) -> None:
        """Make `admins` the group's administrators (and `creator` its owner)."""
        for user_id in admins:
            self.set_member(chat_id, user_id, "administrator")
        if creator is not None:
            self.set_member(chat_id, creator, "creator")

    def chat_member(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Answer getChatMember as Telegram does: (HTTP status, Bot API body)."""
        chat_id, user_id = _as_chat_id(params.get("chat_id")), params.get("user_id")
        if chat_id in (None, ""):
            return _error(400, "Bad Request: chat_id is empty")
        if isinstance(user_id, str) and user_id.lstrip("-").isdigit():
            user_id = int(user_id)
        if isinstance(user_id, bool) or not isinstance(user_id, int) or user_id <= 0:
            return _error(400, "Bad Request: invalid user_id specified")
        with self._lock:
            chat = self._chats.get(chat_id)
            user = self._users.get(user_id)
            status = self._members.get(chat_id, {}).get(user_id)
            wrote = (chat_id, user_id) in self._writers
        if chat is None:
            return _error(400, "Bad Request: chat not found")
        if user is None:
            return _error(400, "Bad Request: user not found")
        if status is None:
            private_party = chat["type"] == "private" and user_id == chat["id"]
            present = wrote or private_party or user_id == self.bot_user["id"]
            status = "member" if present else "left"
        member = {"status": status, "user": user} | MEMBER_FIELDS[status]
        return 200, {"ok": True, "result": member}

    def migrate_group(self, old: int, new: int, user_id: int = 1, announce: bool = False) -> None:
        """Upgrade the group `old` to the supergroup `new` (by `user_id`): calls aimed at
        the old id fail with ChatMigrated from now on; `announce` pushes the service
        messages Telegram sends in both chats."""
        if old >= 0 or new >= 0:
            raise ValueError("groups have negative ids")
        with self._lock:
            title = self._chats.get(old, {}).get("title", "Test group")
            self._chats[new] = {"id": new, "type": "supergroup", "title": title}
            self._migrated[old] = new
        if announce:
            gone = self._message(user_id, old, "group", title=title) | {"migrate_to_chat_id": new}
            self.push_update({"message": gone})
            came = self._message(user_id, new, "supergroup", title=title)
            self.push_update({"message": came | {"migrate_from_chat_id": old}})

    # ----- update builders ---------------------------------------------------------------

    def push_update(self, update: dict[str, Any]) -> int:
        """Queue a raw update (update_id assigned if missing) and return its update_id."""
        with self._lock:
            update.setdefault("update_id", next(self._update_ids))
            self.updates.append(update)
            self.pushed.append(copy.deepcopy(update))
            posted = update.get("message")
            if posted is not None:
                key = (posted["chat"]["id"], posted["message_id"])
                self._posted[key] = copy.deepcopy(posted)
            self._changed.notify_all()
        loop, wakeup = self._loop, self._wakeup
        if self._thread is not None and loop is not None and wakeup is not None:
            try:
                loop.call_soon_threadsafe(wakeup.set)
            except RuntimeError:  # the loop closed meanwhile
                pass
        return int(update["update_id"])

    def _message(
        self,
        user_id: int,
        chat_id: int | None = None,
        chat_type: str = "private",
        first_name: str = "Test",
        username: str | None = "test_user",
        language_code: str | None = "ru",
        reply_to_bot: bool = False,
        title: str = "Test group",
        new_id: bool = True,
        reply_to: int | None = None,
        quote: str | None = None,
        topic: int | None = None,
    ) -> dict[str, Any]:
        """Build the common part of a user message (`reply_to`: a message id in the chat
        it replies to, `quote`: the part of that message's text the user quoted, `topic`:
        in that topic of the chat)."""
        user = self._user(user_id, first_name, username, language_code)
        if chat_type == "private":
            chat = {"id": user_id if chat_id is None else chat_id, "type": "private"}
            chat |= {k: v for k, v in user.items() if k in ("first_name", "username")}
        else:
            chat_id = -(10**9 + user_id) if chat_id is None else chat_id
            if chat_id >= 0:
                raise ValueError("group chats need a negative chat_id")
            chat = {"id": chat_id, "type": chat_type, "title": title}
            self._topic_chat(chat)
        with self._lock:
            self._chats[chat["id"]] = chat
            self._users[user_id] = user
            self._writers.add((chat["id"], user_id))
            message_id = 0
            if new_id:
                message_id = next(self._message_ids)
                self._last_message[(chat["id"], user_id)] = message_id
                self._user_messages.add((chat["id"], message_id))
        message = {"message_id": message_id, "date": int(time.time()), "chat": chat, "from": user}
        if reply_to_bot:
            message["reply_to_message"] = self._bot_message(chat, "previous bot message")
        if reply_to is not None:
            message |= self._reply_fields(chat["id"], reply_to, quote)
        self._topic_fields(message, topic)
        return message

    def _reply_fields(self, chat_id: Any, message_id: int, quote: str | None) -> dict[str, Any]:
        """Return `reply_to_message` (and `quote`) as Telegram sends them with a reply."""
        with self._lock:
            replied = self._posted.get((chat_id, message_id)) or self._bot_messages.get(
                (chat_id, message_id)
            )
            replied = copy.deepcopy(replied)
        if replied is None:
            raise ValueError(f"no message {message_id} in chat {chat_id} to reply to")
        replied.pop("reply_to_message", None)  # Telegram does not nest replies
        replied.pop("quote", None)
        fields: dict[str, Any] = {"reply_to_message": replied}
        if quote is not None:
            text = replied.get("text") or replied.get("caption") or ""
            at = text.find(quote)
            if not quote or at < 0:
                raise ValueError("a quote is a part of the replied-to message's text")
            fields["quote"] = {"text": quote, "position": utf16_len(text[:at]), "is_manual": True}
        return fields

    @staticmethod
    def _user(
        user_id: int,
        first_name: str = "Test",
        username: str | None = "test_user",
        language_code: str | None = "ru",
    ) -> dict[str, Any]:
        """Build a User object for a person."""
        user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username:
            user["username"] = username
        if language_code:
            user["language_code"] = language_code
        return user

    def _bot_message(
        self,
        chat: dict[str, Any],
        text: str,
        field: str = "text",
        markup: dict[str, Any] | None = None,
        parse_mode: str | None = None,
        entities: Any = None,
    ) -> dict[str, Any]:
        """Build a message sent by the bot and remember it as Telegram holds it."""
        message = {"date": int(time.time()), "chat": chat, "from": self.bot_user}
        if text:
            message[field] = text
        if entities and not parse_mode:
            message["entities" if field == "text" else "caption_entities"] = entities
        if markup is not None:
            message["reply_markup"] = markup
        with self._lock:
            message["message_id"] = message_id = next(self._message_ids)
            self._bot_messages[(chat["id"], message_id)] = message
            content = content_key(text, parse_mode, entities)
            self._contents[(chat["id"], message_id)] = (content, markup)
            return copy.deepcopy(message)

    def add_file(
        self,
        data: bytes,
        prefix: str = "file",
        file_name: str | None = None,
        mime_type: str | None = None,
    ) -> dict[str, Any]:
        """Store a file and return the fields a message carries for it.

        `prefix` is the kind of file ("voice", "audio", "photo", "document", "sticker"):
        it picks the folder of its `file_path`, and the name or MIME type its extension.
        """
        return self.files.add(data, prefix, file_name, mime_type).fields()

    def _file(self, prefix: str) -> dict[str, Any]:
        """Store placeholder bytes for a file of kind `prefix` and return its fields."""
        return self.files.add(None, prefix).fields()

    def push_text(self, user_id: int, text: str, **kw: Any) -> int:
        """Queue a text message (entities for /commands and @mentions auto-computed)."""
        message = self._message(user_id, **kw) | {"text": text}
        if entities := compute_entities(text):
            message["entities"] = entities
        return self.push_update({"message": message})

    def _push_media(
        self,
        user_id: int,
        media: dict[str, Any],
        caption: str | None,
        media_group_id: str | None,
        kw: dict[str, Any],
    ) -> int:
        """Queue a message carrying `media` (e.g. {"voice": ...}) with its caption."""
        message = self._message(user_id, **kw) | media
        if media_group_id is not None:
            message["media_group_id"] = media_group_id
        if caption is not None:
            message["caption"] = caption
            if entities := compute_entities(caption):
                message["caption_entities"] = entities
        return self.push_update({"message": message})

    def _photo_sizes(self, data: bytes | None) -> list[dict[str, Any]]:
        """Store a photo's sizes and return its PhotoSize list, the largest last.

        With `data` the largest is that image and the smaller ones are JPEGs shrunk from
        it; without, two placeholder sizes (90 and 800 pixels square).
        """
        if data is None:
            return [self._file("photo") | {"width": w, "height": w} for w in (90, 800)]
        info = image_info(data)
        if info is None:
            raise ValueError("a photo's data must be an image Pillow can read")
        _, width, height = info
        sizes = []
        for side in THUMBNAIL_SIDES:
            if side < max(width, height):
                small, w, h = downscale_jpeg(data, side)
                sizes.append(self.add_file(small, "photo") | {"width": w, "height": h})
        return sizes + [self.add_file(data, "photo") | {"width": width, "height": height}]

    def push_photo(
        self,
        user_id: int,
        caption: str | None = None,
        data: bytes | None = None,
        media_group_id: str | None = None,
        **kw: Any,
    ) -> int:
        """Queue a photo message (its sizes stored; see `_photo_sizes`)."""
        sizes = self._photo_sizes(data)
        return self._push_media(user_id, {"photo": sizes}, caption, media_group_id, kw)

    def push_sticker(self, user_id: int, emoji: str = "😀", **kw: Any) -> int:
        """Queue a sticker message."""
        sticker = self._file("sticker") | {"type": "regular", "width": 512, "height": 512}
        sticker |= {"is_animated": False, "is_video": False, "emoji": emoji}
        return self.push_update({"message": self._message(user_id, **kw) | {"sticker": sticker}})

    def push_voice(
        self,
        user_id: int,
        data: bytes | None = None,
        duration: int = 3,
        caption: str | None = None,
        **kw: Any,
    ) -> int:
        """Queue a voice note (Ogg Opus); without `data`, placeholder bytes are stored."""
        voice = self.files.add(data, "voice", mime_type="audio/ogg").fields()
        voice |= {"duration": duration, "mime_type": "audio/ogg"}
        return self._push_media(user_id, {"voice": voice}, caption, None, kw)

    def push_audio(
        self,
        user_id: int,
        data: bytes,
        duration: int,
        file_name: str = "song.mp3",
        mime_type: str = "audio/mpeg",
        caption: str | None = None,
        **kw: Any,
    ) -> int:
        """Queue an audio file (music, not a voice note)."""
        audio = self.add_file(data, "audio", file_name, mime_type)
        audio |= {"duration": duration, "file_name": file_name, "mime_type": mime_type}
        return self._push_media(user_id, {"audio": audio}, caption, None, kw)

    def push_document(
        self,
        user_id: int,
        file_name: str = "notes.txt",
        data: bytes | None = None,
        mime_type: str | None = None,
        caption: str | None = None,
        media_group_id: str | None = None,
        **kw: Any,
    ) -> int:
        """Queue a document (MIME type guessed from the name unless given)."""
        mime_type = mime_type or guess_mime(file_name)
        doc = self.files.add(data, "document", file_name, mime_type).fields()
        doc |= {"file_name": file_name, "mime_type": mime_type}
        return self._push_media(user_id, {"document": doc}, caption, media_group_id, kw)

    def push_album(
        self, user_id: int, items: list[dict[str, Any]], caption: str | None = None, **kw: Any
    ) -> list[int]:
        """Queue an album: one message per item, consecutive updates, one new media_group_id.

        Items are {"photo": bytes} or {"document": bytes, "file_name": ..., "mime_type": ...},
        2 to 10 of them and not both kinds, as Telegram allows. As Telegram does, `caption`
        goes on the first message only; an item's own "caption" goes on its message.
        Returns the update ids.
        """
        kinds = {"photo" if "photo" in item else "document" for item in items}
        if not 2 <= len(items) <= 10 or len(kinds) != 1:
            raise ValueError("an album holds 2 to 10 photos, or 2 to 10 documents")
        with self._lock:
            group = str(10**17 + next(self._media_groups))
        ids = []
        for n, item in enumerate(items):
            text = item.get("caption", caption if n == 0 else None)
            if "photo" in item:
                ids.append(self.push_photo(user_id, text, item["photo"], group, **kw))
                continue
            name, mime = item.get("file_name", "file"), item.get("mime_type")
            ids.append(self.push_document(user_id, name, item["document"], mime, text, group, **kw))
        return ids

    def push_edited_text(
        self, user_id: int, text: str, message_id: int | None = None, **kw: Any
    ) -> int:
        """Queue an edit of the user's last (or given) message in that chat."""
        message = self._message(user_id, new_id=False, **kw)
        with self._lock:
            previous = self._last_message.get((message["chat"]["id"], user_id))
        message_id = message_id or previous
        if message_id is None:
            raise ValueError("no earlier message from this user in this chat to edit")
        message |= {"message_id": message_id, "text": text, "edit_date": int(time.time())}
        if entities := compute_entities(text):
            message["entities"] = entities
        return self.push_update({"edited_message": message})

    def push_callback(
        self, user_id: int, chat_id: int, message_id: int, data: str, **kw: Any
    ) -> int:
        """Queue a press of the button with callback `data` under the bot's message.

        As on Telegram, only a button that is there can be pressed: the message must be the
        bot's and not deleted, its inline keyboard must hold the button, and in a private
        chat only its user presses. `kw` are the presser's `first_name`, `username` and
        `language_code`. Returns the update_id; the query's id is in the update.
        """
        with self._lock:
            key = (self._chat(chat_id)["id"], message_id)
            message = copy.deepcopy(self._bot_messages.get(key))
            if message is None:
                raise ValueError(f"no message {message_id} of the bot in chat {chat_id}")
            if data not in callback_data_of(message.get("reply_markup")):
                raise ValueError(f"message {message_id} has no button with data {data!r}")
            chat = message["chat"]
            if chat["type"] == "private" and chat["id"] != user_id:
                raise ValueError("in a private chat only its user presses buttons")
            user = self._user(user_id, **kw) if kw else self._users.get(user_id)
            self._users[user_id] = user = user or self._user(user_id)
            query_id = str(10**18 + next(self._query_ids))
            instance = str(zlib.crc32(f"chat:{chat['id']}".encode()) * 7 + 10**15)
            query = {"id": query_id, "from": user, "message": message}
            query |= {"chat_instance": instance, "data": data}
            self._open_queries[query_id] = query
        return self.push_update({"callback_query": query})

    def push_channel_post(self, chat_id: int, text: str, title: str = "Test channel") -> int:
        """Queue a channel post (no `from`, `sender_chat` set)."""
        if chat_id >= 0:
            raise ValueError("channels have negative ids")
        chat = {"id": chat_id, "type": "channel", "title": title}
        with self._lock:
            message_id = next(self._message_ids)
        post = {"message_id": message_id, "date": int(time.time()), "chat": chat, "text": text}
        return self.push_update({"channel_post": post | {"sender_chat": chat}})

    # ----- HTTP side ---------------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        return app

    async def _startup(self) -> None:
        self._wakeup = asyncio.Event()
        await super()._startup()

    async def _params(self, request: web.Request) -> dict[str, Any]:
        """Parse query, JSON, url-encoded or multipart parameters."""
        params: dict[str, Any] = {k: _decode(k, v) for k, v in request.query.items()}
        if request.content_type == "application/json":
            try:
                params |= await request.json() if request.can_read_body else {}
            except ValueError:
                params["_invalid_json"] = True
        elif request.can_read_body:
            for key, value in (await request.post()).items():
                if isinstance(value, web.FileField):
                    data = value.file.read()
                    params[key] = {"filename": value.filename, "size": len(data), "data": data}
                else:
                    params[key] = _decode(key, str(value))
        return params

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _fail(401, "Unauthorized")
        name = request.match_info["method"]
        method = name.lower()
        params = await self._params(request)
        chat_id = _as_chat_id(params.get("chat_id"))
        with self._lock:
            self.calls.append({"method": name, "params": params, "time": time.time()})
            queue = self._faults.get(method) or self._faults.get("*")
            fault = queue.popleft() if queue else None
            known = method != "sendmessagedraft" or self.drafts_supported
            blocked = known and method in CHAT_METHODS and chat_id in self.blocked
            moved = self._migrated.get(chat_id) if method in CHAT_METHODS else None
        if self.delay:
            await self._sleep(self.delay)
        if fault is not None:
            return _fail(fault["error_code"], fault["description"], fault["retry_after"])
        if not known:
            return _fail(404, "Not Found: method not found")
        if blocked:
            return _fail(403, ERROR_TEXT[403])
        if moved is not None:
            body = {"ok": False, "error_code": 400, "description": MIGRATED}
            body["parameters"] = {"migrate_to_chat_id": moved}
            return web.json_response(body, status=400)
        handler = getattr(self, f"_m_{method}", None)
        if handler is not None:
            result = await handler(params)
            return result if isinstance(result, web.Response) else _ok(result)
        if method in TRUE_METHODS:
            return _ok(True)
        return _fail(404, "Not Found: method not found")

    async def _download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _fail(401, "Unauthorized")
        stored = self.files.at(request.match_info["path"])
        if stored is None:
            return _fail(404, "Not Found")
        with self._lock:
            fault = self._download_faults.popleft() if self._download_faults else None
            if fault is None:
                self.downloads.append(stored.file_id)
        if fault is not None:
            return _fail(fault, ERROR_TEXT.get(fault, "Error"))
        return web.Response(body=stored.data)

    async def _m_getme(self, params: dict[str, Any]) -> Any:
        return self.bot_user

    async def _m_getchatmember(self, params: dict[str, Any]) -> Any:
        status, body = self.chat_member(params)
        return web.json_response(body, status=status)

    async def _m_getupdates(self, params: dict[str, Any]) -> Any:
        if self.webhook_url:
            return _fail(409, "Conflict: can't use getUpdates method while webhook is active")
        offset, limit = int(params.get("offset") or 0), int(params.get("limit") or 100)
        deadline = time.monotonic() + min(float(params.get("timeout") or 0), self.max_poll_timeout)
        assert self._wakeup is not None
        while True:
            with self._lock:
                if offset > 0:
                    self.updates[:] = [u for u in self.updates if u["update_id"] >= offset]
                found = self.updates[offset:] if offset < 0 else list(self.updates)
                self._wakeup.clear()
            left = deadline - time.monotonic()
            if found or left <= 0:
                return found[:limit]
            try:
                await asyncio.wait_for(self._wakeup.wait(), left)
            except TimeoutError:
                pass

    async def _m_setwebhook(self, params: dict[str, Any]) -> Any:
        self.webhook_url = str(params.get("url") or "")
        return True

    async def _m_deletewebhook(self, params: dict[str, Any]) -> Any:
        self.webhook_url = ""
        if params.get("drop_pending_updates"):
            with self._lock:
                self.updates.clear()
        return True

    async def _m_getwebhookinfo(self, params: dict[str, Any]) -> Any:
        with self._lock:
            pending = len(self.updates)
        info = {"url": self.webhook_url, "has_custom_certificate": False}
        return info | {"pending_update_count": pending}

    def _menu_request(self, params: dict[str, Any], setting: bool = False) -> Any:
        """Return (the key of the list a command-menu request names, None), or (None, error)."""
        with self._lock:
            problem = commands_problem(params, self._chats, setting=setting)
        if problem is not None:
            return None, _fail(400, problem)
        return menu_key(scope_of(params), params.get("language_code") or ""), None

    async def _m_setmycommands(self, params: dict[str, Any]) -> Any:
        key, error = self._menu_request(params, setting=True)
        if error is not None:
            return error
        kept = [
            {"command": str(c["command"]).strip().removeprefix("/")}
            | {"description": str(c["description"]).strip()}
            for c in params.get("commands") or []
        ]
        with self._lock:
            if kept:
                self.commands[key] = kept
            else:  # an empty list deletes the menu, as Telegram does
                self.commands.pop(key, None)
        return True

    async def _m_getmycommands(self, params: dict[str, Any]) -> Any:
        key, error = self._menu_request(params)
        if error is not None:
            return error
        with self._lock:
            return copy.deepcopy(self.commands.get(key, []))

    async def _m_deletemycommands(self, params: dict[str, Any]) -> Any:
        key, error = self._menu_request(params)
        if error is not None:
            return error
        with self._lock:
            self.commands.pop(key, None)
        return True

    def menu(self, chat_id: int, user_id: int, language_code: str | None = None) -> dict[str, str]:
        """Return the commands `user_id` sees in the menu of `chat_id`, each with its
        description (see `menu_for`)."""
        with self._lock:
            chat = self._chats.get(chat_id) or {"id": chat_id, "type": "private"}
            status = self._members.get(chat_id, {}).get(user_id)
            found = menu_for(
                self.commands, chat, user_id, language_code, status in ("creator", "administrator")
            )
            return {c["command"]: c["description"] for c in found}

    async def _m_getfile(self, params: dict[str, Any]) -> Any:
        stored = self.files.get(str(params.get("file_id") or ""))
        if stored is None:
            return _fail(400, "Bad Request: invalid file_id")
        if len(stored.data) > self.download_limit:
            return _fail(400, "Bad Request: file is too big")
        return stored.fields() | {"file_path": stored.file_path}

    async def _m_sendchataction(self, params: dict[str, Any]) -> Any:
        if error := self.thread_problem(_as_chat_id(params.get("chat_id")), params):
            return error
        record = {"chat_id": _as_chat_id(params.get("chat_id")), "action": params.get("action")}
        with self._changed:
            self.actions.append(record | {"time": time.time()})
            self._changed.notify_all()
        return True

    def _check_text(
        self, text: str, params: dict[str, Any], allow_empty: bool = False
    ) -> web.Response | None:
        """Return a 400 answer if Telegram would reject this text, else None."""
        parse_mode = params.get("parse_mode")
        entities = None if parse_mode else params.get("entities")
        if parse_mode and self.reject_parse_mode:
            return _fail(400, "Bad Request: can't parse entities: unsupported start tag at byte 0")
        if entities is not None and self.reject_parse_mode:
            return _fail(400, "Bad Request: can't parse MessageEntity: Unsupported type specified")
        if entities is not None and (problem := entities_problem(text, entities)):
            return _fail(400, problem)
        visible = shown_text(visible_text(text, parse_mode))
        if not visible.strip() and not allow_empty:
            return _fail(400, "Bad Request: message text is empty")
        # Telegram counts the limit in characters (code points) of the trimmed text.
        if len(visible) > self.max_message_length:
            return _fail(400, "Bad Request: message is too long")
        return None

    def _chat(self, chat_id: Any) -> dict[str, Any]:
        """Return the chat object for an id, guessing its type if it was never seen."""
        with self._lock:
            if chat_id in self._chats:
                return self._chats[chat_id]
        if isinstance(chat_id, int) and chat_id > 0:
            return {"id": chat_id, "type": "private", "first_name": "Test"}
        return {"id": chat_id if isinstance(chat_id, int) else -1, "type": "supergroup"}

    def _record(
        self, method: str, chat_id: Any, text: str, params: dict[str, Any], mid: int
    ) -> None:
        entry = {"method": method, "chat_id": chat_id, "text": text, "params": params}
        with self._changed:
            self.sent.append(entry | {"time": time.time(), "message_id": mid})
            self._changed.notify_all()

    async def _send(
        self, params: dict[str, Any], method: str, field: str, media: dict[str, Any] | None = None
    ) -> Any:
        chat_id = _as_chat_id(params.get("chat_id"))
        text = str(params.get(field) or "")
        if field == "text" and (error := self._check_text(text, params)):
            return error
        markup = params.get("reply_markup")
        if markup is not None and (problem := markup_problem(markup, inline_only=False)):
            return _fail(400, problem)
        if error := self.thread_problem(chat_id, params):
            return error
        parse_mode = params.get("parse_mode")
        chat = self._chat(chat_id)
        entities = params.get("entities" if field == "text" else "caption_entities")
        message = self._bot_message(chat, text, field, inline_markup(markup), parse_mode, entities)
        self._in_thread(message, params)
        self._record(method, chat_id, text, params, message["message_id"])
        return message | (media or {})

    async def _m_sendmessage(self, params: dict[str, Any]) -> Any:
        return await self._send(params, "sendMessage", "text")

    async def _m_sendphoto(self, params: dict[str, Any]) -> Any:
        photo = self._file("photo") | {"width": 800, "height": 800}
        return await self._send(params, "sendPhoto", "caption", {"photo": [photo]})

    async def _m_senddocument(self, params: dict[str, Any]) -> Any:
        document = self._file("document")
        return await self._send(params, "sendDocument", "caption", {"document": document})

    async def _m_sendvoice(self, params: dict[str, Any]) -> Any:
        voice = self._file("voice") | {"duration": 1}
        return await self._send(params, "sendVoice", "caption", {"voice": voice})

    async def _m_sendsticker(self, params: dict[str, Any]) -> Any:
        sticker = self._file("sticker") | {"type": "regular", "width": 512, "height": 512}
        sticker |= {"is_animated": False, "is_video": False}
        return await self._send(params, "sendSticker", "caption", {"sticker": sticker})

    def _editable(self, params: dict[str, Any]) -> tuple[Any, web.Response | None]:
        """Return the key of the bot message an edit names, or the 400 Telegram answers."""
        message_id = _int(params.get("message_id"))
        if not message_id:
            return None, _fail(400, "Bad Request: message identifier is not specified")
        key = (self._chat(_as_chat_id(params.get("chat_id")))["id"], message_id)
        with self._lock:
            if key not in self._bot_messages:
                return key, _fail(400, "Bad Request: message to edit not found")
        return key, None

    def _edit(self, key: Any, text: str | None, params: dict[str, Any]) -> Any:
        """Change a bot message's text (None: keep it) and keyboard, unless nothing changes."""
        markup = inline_markup(params.get("reply_markup"))
        with self._lock:
            message = self._bot_messages[key]
            if text is None:
                content = self._contents[key][0]
            else:
                content = content_key(text, params.get("parse_mode"), params.get("entities"))
            if (content, markup) == self._contents[key]:
                return _fail(400, NOT_MODIFIED)
            self._contents[key] = (content, markup)
            if text is not None:
                message["text"] = text
                message.pop("entities", None)
                if params.get("entities") and not params.get("parse_mode"):
                    message["entities"] = params["entities"]
            message.pop("reply_markup", None)
            if markup is not None:
                message["reply_markup"] = markup
            message["edit_date"] = int(time.time())
            return copy.deepcopy(message)

    async def _m_editmessagetext(self, params: dict[str, Any]) -> Any:
        text = str(params.get("text") or "")
        if error := self._check_text(text, params):
            return error
        markup = params.get("reply_markup")
        if markup is not None and (problem := markup_problem(markup, inline_only=True)):
            return _fail(400, problem)
        if params.get("inline_message_id"):
            return True
        key, error = self._editable(params)
        if error is not None:
            return error
        with self._lock:
            if "text" not in self._bot_messages[key]:
                return _fail(400, "Bad Request: there is no text in the message to edit")
        edited = self._edit(key, text, params)
        if not isinstance(edited, web.Response):
            chat_id = _as_chat_id(params.get("chat_id"))
            self._record("editMessageText", chat_id, text, params, key[1])
        return edited

    async def _m_editmessagereplymarkup(self, params: dict[str, Any]) -> Any:
        markup = params.get("reply_markup")
        if markup is not None and (problem := markup_problem(markup, inline_only=True)):
            return _fail(400, problem)
        if params.get("inline_message_id"):
            return True
        key, error = self._editable(params)
        if error is not None:
            return error
        edited = self._edit(key, None, params)
        if not isinstance(edited, web.Response):
            entry = {"chat_id": _as_chat_id(params.get("chat_id")), "message_id": key[1]}
            entry |= {"reply_markup": edited.get("reply_markup"), "params": params}
            with self._changed:
                self.markup_edits.append(entry | {"time": time.time()})
                self._changed.notify_all()
        return edited

    async def _m_deletemessage(self, params: dict[str, Any]) -> Any:
        chat_id, message_id = _as_chat_id(params.get("chat_id")), _int(params.get("message_id"))
        if not message_id:
            return _fail(400, "Bad Request: message identifier is not specified")
        chat = self._chat(chat_id)
        key = (chat["id"], message_id)
        with self._changed:
            if key in self._user_messages and chat["type"] != "private":
                status = self._members.get(chat["id"], {}).get(self.bot_user["id"])
                if status not in ("administrator", "creator"):
                    return _fail(400, "Bad Request: message can't be deleted")
            if self._bot_messages.pop(key, None) is None and key not in self._user_messages:
                return _fail(400, "Bad Request: message to delete not found")
            self._user_messages.discard(key)
            self._contents.pop(key, None)
            self.deleted.append(
                {"chat_id": chat_id, "message_id": message_id} | {"time": time.time()}
            )
            self._changed.notify_all()
        return True

    async def _m_sendmessagedraft(self, params: dict[str, Any]) -> Any:
        chat_id = _as_chat_id(params.get("chat_id"))
        if chat_id in (None, ""):
            return _fail(400, "Bad Request: chat_id is empty")
        if self._chat(chat_id)["type"] != "private":
            return _fail(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        if error := self.thread_problem(chat_id, params):
            return error
        draft_id = _int(params.get("draft_id"))
        if not draft_id:
            return _fail(400, "Bad Request: RANDOM_ID_INVALID")
        text = str(params.get("text") or "")
        if error := self._check_text(text, params, allow_empty=True):
            return error
        entry = {"chat_id": chat_id, "draft_id": draft_id, "text": text, "params": params}
        with self._changed:
            self.drafts.append(entry | {"time": time.time()})
            self._changed.notify_all()
        return True

    async def _m_answercallbackquery(self, params: dict[str, Any]) -> Any:
        query_id = str(params.get("callback_query_id") or "")
        text = str(params.get("text") or "")
        if len(text) > MAX_CALLBACK_ANSWER:
            return _fail(400, "Bad Request: MESSAGE_TOO_LONG")
        with self._changed:
            query = self._open_queries.pop(query_id, None)
            if query is None:
                return _fail(400, QUERY_INVALID)
            answer: dict[str, Any] = {"callback_query_id": query_id, "text": text or None}
            answer |= {"show_alert": bool(params.get("show_alert")), "url": params.get("url")}
            answer |= {"data": query["data"], "params": params, "time": time.time()}
            self.callback_answers.append(answer)
            self._changed.notify_all()
        return True


def _ok(result: Any) -> web.Response:
    """Return a successful Bot API answer."""
    return web.json_response({"ok": True, "result": result})


def _error(
    code: int, description: str, retry_after: int | None = None
) -> tuple[int, dict[str, Any]]:
    """Return a failed Bot API answer as (HTTP status, body)."""
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if retry_after:
        body["parameters"] = {"retry_after": retry_after}
    return code, body


def _fail(code: int, description: str, retry_after: int | None = None) -> web.Response:
    """Return a failed Bot API answer with the matching HTTP status."""
    status, body = _error(code, description, retry_after)
    return web.json_response(body, status=status)
