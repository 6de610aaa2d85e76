"""What a turn and a command take and give back: whose memory, the reply, the live watch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from src.graph.rights import Role
from src.services.texts import t


@dataclass(frozen=True)
class Identity:
    """Whose memory a turn uses: a private chat's user, or a group chat."""

    owner_id: int
    username: str | None = None
    first_name: str | None = None
    language_code: str | None = None
    sender_id: int | None = None
    """Who wrote the message (in groups not the owner): an admin spends without budget."""
    topic_id: int = 0
    """The topic whose conversation the turn uses: a forum topic's or a private chat
    topic's `message_thread_id`; 0 for the General topic and chats without topics."""
    member_id: int = 0
    """In a group, the member whose own facts the turn uses and its fact tools change: the
    Telegram user id the update carries (`from.id`), never a name in the text; 0 in a
    private chat and for a group speaking as itself (an anonymous administrator)."""
    role: Role = Role.OWNER
    """What the person who wrote may do in this chat (src/graph/rights.py), decided by the
    bot from who wrote where; the turn's tools ask it."""


@dataclass
class TurnResult:
    """What one turn produced for the user."""

    reply: str
    ok: bool = True
    stored: bool = True
    conversation_id: str | None = None
    tools_used: list[str] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_estimated: bool = False
    """The endpoint reported no usage for some call: the tokens are an estimate."""
    context_tokens: int = 0
    ms: float = 0.0

    def collect(self, values: dict[str, Any]) -> None:
        """Take what a node of the turn's graph wrote that the caller is told: the reply,
        the tools used, the context's size and the tokens."""
        if "reply" in values:
            self.reply = values["reply"]
        if "tools_used" in values:
            self.tools_used = list(values["tools_used"])
        if "context_tokens" in values:
            self.context_tokens = values["context_tokens"]
        if "usage" in values:
            self.tokens_in = values["usage"].get("input", 0)
            self.tokens_out = values["usage"].get("output", 0)
            self.tokens_estimated = bool(values["usage"].get("estimated"))


@dataclass
class TurnStream:
    """Watch one turn live: the answer's text as the model writes it, the tools it runs,
    and a way to stop it (`stop.set()`: the answer so far becomes the reply)."""

    on_text: Callable[[str], None]
    """Called with each new piece of the answer's text."""
    on_tools: Callable[[list[str]], None]
    """Called with the names of the tools that run now; the text written before them
    was not the answer (the next piece starts it anew)."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def relay(self, event: Any) -> None:
        """Pass on what the agent node writes as it goes: text, or the tools that run."""
        if not isinstance(event, dict):
            return
        if "text" in event:
            self.on_text(event["text"])
        elif "tools" in event:
            self.on_tools(list(event["tools"]))


@dataclass
class CompressResult:
    """What /compress did: how many messages and tokens the context is shorter by."""

    ok: bool = True
    compressible: int = 0
    compressions: int = 0
    messages_replaced: int = 0
    tokens_before: int = 0
    tokens_saved: int = 0
    reply: str = ""
    """The report for the user, in their language."""

    @property
    def messages_saved(self) -> int:
        """Messages fewer in the context: each compression turned a run into one."""
        return self.messages_replaced - self.compressions

    @property
    def tokens_after(self) -> int:
        """Tokens of the working memory after the compression (approximate)."""
        return max(0, self.tokens_before - self.tokens_saved)

    def text(self, language_code: str | None = None) -> str:
        """Return the report for the user, in their language."""
        if not self.ok:
            return t("compress_failed", language_code)
        if self.compressible < 2:
            return t("compress_nothing", language_code)
        if not self.compressions:
            return t("compress_declined", language_code)
        return t(
            "compress_report",
            language_code,
            messages=self.messages_saved,
            tokens=self.tokens_saved,
            before=self.tokens_before,
            after=self.tokens_after,
        )


def session_over(conversation: dict[str, Any], now: datetime, idle_minutes: float) -> bool:
    """Tell whether the conversation's current session ended by silence and is not yet
    ended (compacted) in memory."""
    last, ended = conversation.get("last_message_at"), conversation.get("ended_at")
    if last is None or (ended is not None and ended >= last):
        return False
    return now - last > timedelta(minutes=idle_minutes)
