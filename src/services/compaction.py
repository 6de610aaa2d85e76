"""Session compacts (seed 001): a finished session squeezed by a cheap model into
`{timestamp, summary (~500 chars), topics[], lastAction}`, at most `MAX_COMPACTS` per user.

A session ends on `/new` (compacted before the wipe) and after `SESSION_IDLE_MINUTES` of
silence (`compact_idle`, run by a job). An idle conversation is not closed: the user's
next message continues it, as the Telegram thread on their screen does; its compact is
refreshed when it falls silent again, and the compact of the conversation in progress is
never shown in its own prompt (its messages and summary are already there).

Compaction never blocks `/new` and never loses a session: a model error, invalid JSON or
a summary far over 500 characters is repaired or recorded as plain text, and logged; a
slow model is waited for a few seconds, then finishes in the background.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from src.graph import prompts
from src.graph.context import Layers, truncate_text
from src.graph.deps import GraphDeps
from src.graph.facts import load_json

logger = logging.getLogger(__name__)

COMPACT_CHARS = 500
# A summary longer than this is "far over" 500 characters: cut on a sentence.
TOO_LONG_CHARS = 700
MAX_TOPICS = 10
# Newest live messages of a session read for its compact (older ones are in its summary).
SESSION_MESSAGES = 200
# How long /new waits for the model before going on without it.
WAIT_SECONDS = 10.0
_STAMP = re.compile(r"^\[[^\]]{0,40}\d{4}-\d\d-\d\d \d\d:\d\d\]\s*")


class _Chars:
    """A "token counter" counting characters, to cut text to a length on a sentence."""

    name = "characters"

    def count(self, text: str) -> int:
        return len(text)


@dataclass
class Compact:
    """One session compact, ready to store."""

    summary: str
    topics: list[str] = field(default_factory=list)
    last_action: str = ""
    repaired: str = ""
    """Why the model's answer was not used as is ("" when it was)."""


@dataclass
class Session:
    """What a compact is made from: the session as text, and when it ended."""

    owner_id: int
    conversation_id: uuid.UUID
    text: str
    ended_at: datetime | None
    rows: list[dict[str, Any]]
    summary: str = ""


def shorten(text: str, chars: int = COMPACT_CHARS) -> str:
    """Cut `text` to `chars` characters after a whole sentence (or between words)."""
    return truncate_text(" ".join(text.split()), chars, _Chars())


def _topics(value: Any) -> list[str]:
    if isinstance(value, str):
        value = re.split(r"[,;\n]", value)
    if not isinstance(value, list):
        return []
    topics = [" ".join(str(t).split())[:60] for t in value if str(t).strip()]
    return list(dict.fromkeys(topics))[:MAX_TOPICS]


def parse_compact(answer: str) -> Compact:
    """Return the compact in a model's answer, repaired where needed.

    JSON as asked is used as is; a summary far over 500 characters is cut on a sentence;
    an answer that is not JSON is kept as a plain-text summary.
    """
    data = load_json(answer)
    if isinstance(data, dict) and str(data.get("summary") or "").strip():
        compact = Compact(
            summary=" ".join(str(data["summary"]).split()),
            topics=_topics(data.get("topics")),
            last_action=" ".join(
                str(data.get("lastAction") or data.get("last_action") or "").split()
            ),
        )
    else:
        plain = re.sub(r"```\w*", "", answer).strip()
        compact = Compact(summary=" ".join(plain.split()), repaired="not JSON")
    if len(compact.summary) > TOO_LONG_CHARS:
        compact.summary = shorten(compact.summary)
        compact.repaired = compact.repaired or "summary too long"
    compact.last_action = shorten(compact.last_action, 200)
    if not compact.summary:
        raise ValueError("the compact model returned an empty summary")
    return compact


def fallback_compact(rows: list[dict[str, Any]], summary: str) -> Compact:
    """Build a plain-text compact without the model: what the user wrote, the last answer."""
    asked = [_STAMP.sub("", r["content"]).strip() for r in rows if r["role"] == "user"]
    answers = [r["content"].strip() for r in rows if r["role"] == "assistant" and r["content"]]
    text = "User wrote: " + " | ".join(a for a in asked if a) if asked else summary
    last = shorten(answers[-1], 200) if answers else ""
    return Compact(summary=shorten(text), last_action=last, repaired="model failed")


class Compactor:
    """Compact sessions into the user's long-term memory (seed 001)."""

    def __init__(
        self, deps: GraphDeps, model: BaseChatModel, wait_seconds: float = WAIT_SECONDS
    ) -> None:
        self.deps = deps
        self.model = model
        self.wait_seconds = wait_seconds
        self._tasks: set[asyncio.Task[Any]] = set()

    async def read_session(self, owner_id: int, conversation_id: uuid.UUID) -> Session | None:
        """Return the session as text for the model (bounded), or None if there is none.

        Messages before the summary point are represented by the running summary; after
        /forget both are gone, so a forgotten part is never compacted either.
        """
        deps = self.deps
        conv = await deps.conversations.get_conversation(conversation_id)
        if conv is None or conv["telegram_user_id"] != owner_id:
            return None
        rows = await deps.conversations.load_last_messages(conversation_id, SESSION_MESSAGES)
        rows = [r for r in rows if r["id"] > conv["summary_upto_id"]]
        if not any(r["role"] == "user" for r in rows):
            return None
        budget = Layers.for_model(deps.settings, deps.settings.effective_compact_model).working
        per_message = max(64, budget // 8)
        lines: list[str] = []
        left = budget
        for row in reversed(rows):  # the newest matter most: the lastAction
            line = f"[{row['role']}]: {truncate_text(row['content'], per_message, deps.counter)}"
            left -= deps.counter.count(line) + 1
            if left < 0:
                break
            lines.append(line)
        parts = []
        if conv["summary"]:
            parts.append("Summary of the earlier part:\n" + conv["summary"])
        parts.append("Messages:\n" + "\n".join(reversed(lines)))
        ended = rows[-1]["created_at"]
        text = "\n\n".join(parts)
        return Session(owner_id, conversation_id, text, ended, rows, conv["summary"])

    async def store(self, session: Session) -> dict[str, Any] | None:
        """Ask the model for the compact (or build one without it) and store it."""
        prompt = prompts.COMPACT_PROMPT.format(chars=COMPACT_CHARS, conversation=session.text)
        try:
            answer = await self.model.ainvoke(
                [SystemMessage(prompts.COMPACT_SYSTEM), HumanMessage(prompt)]
            )
            compact = parse_compact(answer.text)
        except Exception as exc:
            logger.warning(
                "compaction of %s: model failed (%s: %s); storing plain text",
                session.conversation_id,
                type(exc).__name__,
                exc,
            )
            compact = fallback_compact(session.rows, session.summary)
        if compact.repaired and compact.repaired != "model failed":
            logger.warning(
                "compaction of %s repaired: %s", session.conversation_id, compact.repaired
            )
        row = await self.deps.memory.add_compact(
            session.owner_id,
            session.conversation_id,
            compact.summary,
            compact.topics,
            compact.last_action,
            keep=self.deps.settings.max_compacts,
            created_at=session.ended_at,
        )
        logger.info(
            "compacted session %s of %s (%d chars)",
            session.conversation_id,
            session.owner_id,
            len(compact.summary),
        )
        return row

    async def _store_logged(self, session: Session) -> dict[str, Any] | None:
        try:
            return await self.store(session)
        except Exception:
            logger.error("compaction of %s failed", session.conversation_id, exc_info=True)
            return None

    async def compact(self, owner_id: int, conversation_id: uuid.UUID) -> dict[str, Any] | None:
        """Compact one session and return the stored compact (None: nothing to compact)."""
        session = await self.read_session(owner_id, conversation_id)
        return await self.store(session) if session is not None else None

    async def compact_safely(
        self, owner_id: int, conversation_id: uuid.UUID
    ) -> dict[str, Any] | None:
        """Compact a session for /new without ever failing it or holding it for long.

        The session is read at once (the caller deletes it next); the model is waited
        for `wait_seconds`, after which the compact is finished in the background.
        """
        try:
            session = await self.read_session(owner_id, conversation_id)
        except Exception:
            logger.error("compaction of %s: reading failed", conversation_id, exc_info=True)
            return None
        if session is None:
            return None
        task = asyncio.create_task(self._store_logged(session))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            return await asyncio.wait_for(asyncio.shield(task), self.wait_seconds)
        except TimeoutError:
            logger.warning(
                "compaction of %s is slow; finishing it in the background", conversation_id
            )
            return None

    async def compact_idle(self, now: datetime | None = None, limit: int = 100) -> int:
        """Compact sessions silent for SESSION_IDLE_MINUTES; return how many were handled.

        The conversation stays open; it is marked compacted up to its last message, so
        it is compacted again only after new messages and a new silence.
        """
        now = now or self.deps.clock()
        cutoff = now - timedelta(minutes=self.deps.settings.session_idle_minutes)
        idle = await self.deps.memory.idle_conversations(cutoff, limit)
        for row in idle:
            conversation_id = uuid.UUID(str(row["id"]))
            try:
                session = await self.read_session(row["telegram_user_id"], conversation_id)
                if session is not None:
                    await self.store(session)
            except Exception:
                logger.error("idle compaction of %s failed", conversation_id, exc_info=True)
                continue
            await self.deps.memory.mark_session_ended(conversation_id, row["last_message_at"])
        return len(idle)

    async def drain(self) -> None:
        """Wait for compactions still finishing in the background."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
