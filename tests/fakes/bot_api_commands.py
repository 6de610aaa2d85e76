"""Command menus as the fake Bot API keeps them, the way Telegram does.

`setMyCommands`, `getMyCommands` and `deleteMyCommands` keep one list per `scope` and
`language_code`; `getMyCommands` answers the exact list (no fallback). `commands_problem`
words the 400 Telegram answers a malformed request with: a scope it cannot parse ("can't
parse BotCommandScope: ..."), a chat scope naming a chat the bot never saw ("chat not
found") or an administrator/member scope naming a private chat, a language code that is
not empty or two lower-case letters, and commands that are empty, too long, not lower-case
Latin letters, digits and underscores (BOT_COMMAND_INVALID) or more than 100.

`menu_for` is what a user sees in the menu, following Telegram's order
(https://core.telegram.org/bots/api#determining-list-of-commands): the most specific
scope that has a list, and within a scope the user's language before the list without one.
"""

from __future__ import annotations

import json
import re
from typing import Any

SCOPE_TYPES = (
    "default", "all_private_chats", "all_group_chats", "all_chat_administrators", "chat",
    "chat_administrators", "chat_member",
)  # fmt: skip
CHAT_SCOPES = ("chat", "chat_administrators", "chat_member")
MAX_COMMANDS = 100
MAX_COMMAND = 32
MAX_DESCRIPTION = 256
_COMMAND = re.compile(r"[a-z0-9_]+")
_LANGUAGE = re.compile(r"[a-z]{2}")
CANT_PARSE = "Bad Request: can't parse BotCommandScope: "


def scope_of(params: dict[str, Any]) -> dict[str, Any]:
    """Return the request's scope (the default scope when it names none)."""
    scope = params.get("scope")
    if isinstance(scope, str):  # a JSON-serialized parameter may come as a string
        try:
            scope = json.loads(scope)
        except ValueError:
            return {"type": None}
    return scope if scope not in (None, "") else {"type": "default"}


def menu_key(scope: dict[str, Any], language: str) -> str:
    """Return the key one list is kept under: its scope (type and ids) and language."""
    kept = {k: scope[k] for k in ("type", "chat_id", "user_id") if k in scope}
    return json.dumps([kept, language], sort_keys=True)


def commands_problem(
    params: dict[str, Any], chats: dict[Any, dict[str, Any]], *, setting: bool
) -> str | None:
    """Return the error Telegram answers a command-menu request with, or None."""
    problem = _scope_problem(scope_of(params), chats)
    if problem is not None:
        return problem
    language = params.get("language_code") or ""
    if language and not _LANGUAGE.fullmatch(str(language)):
        return "Bad Request: invalid language code specified"
    if setting:
        return _list_problem(params.get("commands") or [])
    return None


def _scope_problem(scope: Any, chats: dict[Any, dict[str, Any]]) -> str | None:
    if not isinstance(scope, dict):
        return CANT_PARSE + "expected an Object"
    kind = scope.get("type")
    if kind is None:
        return CANT_PARSE + 'Can\'t find field "type"'
    if kind not in SCOPE_TYPES:
        return CANT_PARSE + "Unsupported type specified"
    if kind not in CHAT_SCOPES:
        return None
    if scope.get("chat_id") in (None, ""):
        return CANT_PARSE + 'Can\'t find field "chat_id"'
    if kind == "chat_member":
        user_id = scope.get("user_id")
        if not isinstance(user_id, int) or isinstance(user_id, bool) or user_id <= 0:
            return CANT_PARSE + "Invalid user_id specified"
    chat = chats.get(scope["chat_id"])
    if chat is None:
        return "Bad Request: chat not found"
    if chat["type"] == "private" and kind != "chat":
        return "Bad Request: can't use specified scope in private chats"
    return None


def _list_problem(commands: Any) -> str | None:
    if not isinstance(commands, list):
        return "Bad Request: can't parse commands JSON object"
    if len(commands) > MAX_COMMANDS:
        return "Bad Request: BOT_COMMANDS_TOO_MUCH"
    for item in commands:
        if not isinstance(item, dict) or "command" not in item or "description" not in item:
            return "Bad Request: invalid setMyCommands parameters"
        command = str(item["command"]).strip().removeprefix("/")
        description = str(item["description"]).strip()
        if not command:
            return "Bad Request: command must be non-empty"
        if len(command) > MAX_COMMAND:
            return f"Bad Request: command length must not exceed {MAX_COMMAND}"
        if not _COMMAND.fullmatch(command):
            return "Bad Request: BOT_COMMAND_INVALID"
        if not description:
            return "Bad Request: command description must be non-empty"
        if len(description) > MAX_DESCRIPTION:
            return f"Bad Request: command description length must not exceed {MAX_DESCRIPTION}"
    return None


def menu_for(
    menus: dict[str, list[dict[str, Any]]],
    chat: dict[str, Any],
    user_id: int,
    language: str | None,
    admin: bool,
) -> list[dict[str, Any]]:
    """Return the commands `user_id` sees in `chat`'s menu (`admin`: of that group)."""
    chat_id = chat["id"]
    if chat["type"] == "private":
        scopes = [{"type": "chat", "chat_id": chat_id}, {"type": "all_private_chats"}]
    else:
        scopes = [
            {"type": "chat_member", "chat_id": chat_id, "user_id": user_id},
            *([{"type": "chat_administrators", "chat_id": chat_id}] if admin else []),
            {"type": "chat", "chat_id": chat_id},
            *([{"type": "all_chat_administrators"}] if admin else []),
            {"type": "all_group_chats"},
        ]
    code = (language or "").split("-")[0].lower()
    for scope in [*scopes, {"type": "default"}]:
        for lang in dict.fromkeys([code, ""]):
            found = menus.get(menu_key(scope, lang))
            if found:
                return found
    return []
