"""The `mcpServers` JSON file (`MCP_CONFIG`): its servers, how to reach them, who may use them.

The format is the one Claude Desktop, Cursor and VS Code share: per server, either a
`command` with `args` and `env` (stdio) or a `url` with `headers` (streamable HTTP), and
ours: an optional `allow` ("admins", the default; "allowed"; or a list of user ids). What
`env` and `headers` hold is secret: it is never in an error, a log line or a repr.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from src.config import ConfigError
from src.graph.rights import Role

# A server's name becomes the start of its tools' names, which the model API limits.
NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
# `${VAR}` in an env value or a header is the operator's environment variable.
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
ALLOW_WORDS = ("admins", "allowed")
# The roles whose author the "admins" rule lets in: their private chat, a group they
# administer, the terminal.
ADMIN_ROLES = frozenset({Role.OWNER, Role.ADMIN, Role.TERMINAL})


class McpConfigError(ConfigError):
    """The MCP_CONFIG file cannot be used: one line says why (never a secret)."""


@dataclass(frozen=True)
class Allow:
    """Who may use a server's tools: ADMIN_USER_IDS (`admins`), everyone the bot answers
    (`allowed`), or the listed user ids."""

    rule: str = "admins"
    ids: frozenset[int] = frozenset()

    def permits(self, author: int, role: Role, admins: Collection[int]) -> bool:
        """Tell whether the turn's author, acting with `role`, may use the server."""
        if self.rule == "allowed":
            return True
        if self.rule == "admins":
            return author in admins and role in ADMIN_ROLES
        return author in self.ids

    def describe(self) -> str:
        """Say who may use the server, as `tgagent mcp list` prints it."""
        if self.rule == "allowed":
            return "every allowed user"
        if self.rule == "admins":
            return "ADMIN_USER_IDS (private chats, groups they administer, the terminal)"
        return "users " + ", ".join(str(i) for i in sorted(self.ids))


@dataclass(frozen=True)
class ServerConfig:
    """One server of the file: its name, how to reach it, who may use it."""

    name: str
    transport: str
    """"stdio" or "streamable_http"."""
    allow: Allow
    connection: Mapping[str, Any] = field(repr=False)
    """What langchain-mcp-adapters connects with; holds the secrets (never printed)."""

    def scrub(self, text: str) -> str:
        """Return `text` with every value of the server's env and headers blotted out."""
        for group in ("env", "headers"):
            for value in (self.connection.get(group) or {}).values():
                if len(value) >= 4:
                    text = text.replace(value, "***")
        return text

    @property
    def where(self) -> str:
        """Say where the server is without its secrets: the command, or the URL's host."""
        if self.transport == "stdio":
            return str(self.connection["command"])
        url = str(self.connection["url"])
        return re.sub(r"//[^/@]*@", "//", url).split("?")[0]


def secrets_in(path: Path) -> list[str]:
    """Return every secret value of the file (env and headers, a URL's password and
    query), for the log's redaction; none when the file cannot be read (that error is
    reported where the servers start)."""
    try:
        servers = load_config(path)
    except McpConfigError:
        return []
    out: list[str] = []
    for server in servers:
        for group in ("env", "headers"):
            out += [v for v in (server.connection.get(group) or {}).values() if len(v) >= 4]
        if server.transport != "stdio":
            url = urlsplit(str(server.connection["url"]))
            out += [part for part in (url.password, url.query) if part and len(part) >= 4]
    return out


def load_config(path: Path) -> list[ServerConfig]:
    """Read MCP_CONFIG; McpConfigError (one line, no secret) when it cannot be used."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise McpConfigError(f"MCP_CONFIG {path}: cannot be read ({exc.strerror})") from None
    except ValueError as exc:
        raise McpConfigError(f"MCP_CONFIG {path}: not JSON ({exc})") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise McpConfigError(f'MCP_CONFIG {path}: expected {{"mcpServers": {{...}}}}')
    return [_server(path, name, entry) for name, entry in servers.items()]


def _server(path: Path, name: str, entry: Any) -> ServerConfig:
    where = f"MCP_CONFIG {path}: server {name!r}"
    if not NAME.match(name):
        raise McpConfigError(f"{where}: a name is 1-32 letters, digits, _ or -")
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where}: expected an object")
    allow = _allow(where, entry.get("allow", "admins"))
    if "command" in entry and "url" in entry:
        raise McpConfigError(f"{where}: has both a command and a url")
    if isinstance(entry.get("command"), str) and entry["command"]:
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise McpConfigError(f"{where}: args must be a list of strings")
        connection: dict[str, Any] = {
            "transport": "stdio",
            "command": entry["command"],
            "args": args,
            "env": _secrets(where, "env", entry.get("env")),
        }
        if isinstance(entry.get("cwd"), str):
            connection["cwd"] = entry["cwd"]
        return ServerConfig(name, "stdio", allow, connection)
    if isinstance(entry.get("url"), str) and entry["url"].startswith(("http://", "https://")):
        connection = {
            "transport": "streamable_http",
            "url": entry["url"],
            "headers": _secrets(where, "headers", entry.get("headers")),
        }
        return ServerConfig(name, "streamable_http", allow, connection)
    raise McpConfigError(f"{where}: needs a command (stdio) or an http(s) url")


def _allow(where: str, value: Any) -> Allow:
    if value in ALLOW_WORDS:
        return Allow(value)
    if isinstance(value, list) and value and all(type(i) is int for i in value):
        return Allow("ids", frozenset(value))
    raise McpConfigError(f'{where}: allow is "admins", "allowed" or a list of user ids')


def _secrets(where: str, what: str, value: Any) -> dict[str, str] | None:
    """Return `env` or `headers` with `${VAR}` filled in from the environment (a
    variable that is not set is an error naming the key, never the value)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise McpConfigError(f"{where}: {what} must be an object of strings")
    out: dict[str, str] = {}
    for key, text in value.items():
        missing = [v for v in VARIABLE.findall(text) if v not in os.environ]
        if missing:
            raise McpConfigError(f"{where}: {what} {key!r} names unset variable {missing[0]}")
        out[str(key)] = VARIABLE.sub(lambda m: os.environ[m.group(1)], text)
    return out
