"""Session ends (seed 001): facts from the session, and a compact of it.

A session is a stretch of a conversation: it ends at `/new`, or after
`SESSION_IDLE_MINUTES` of silence (noticed by the periodic job, or when the next message
arrives, before it is answered). An idle conversation is not closed: the user's next
message continues it, as the Telegram thread on their screen does, in a new session.
Each ended session gets its own compact, `{timestamp, summary (~500 chars), topics[],
lastAction}` written by a cheap model, at most `MAX_COMPACTS` per user; the compacts of
ended sessions, this conversation's earlier ones included, appear under "Previous
conversations" in later prompts. Facts not extracted yet are extracted at every end.

Ending a session never blocks for long and never loses it: a model error, invalid JSON
or a summary far over 500 characters is repaired or recorded as plain text, and logged;
a slow model is waited for a few seconds, then a plain-text compact is stored at once and
the model's replaces it when it comes.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from src.graph import prompts
from src.graph.context.budget import Layers, shorten
from src.graph.context.render import transcript_line
from src.graph.deps import GraphDeps
from src.graph.memory.facts import WIPE_READ_LIMIT, Batch, extract_batch, read_pending
from src.graph.memory.structured import load_json, object_schema
from src.graph.model_calls import call_config
from src.graph.output_caps import COMPACT_TOKENS, with_output_cap
from src.graph.timestamps import strip_stamp

logger = logging.getLogger(__name__)

COMPACT_CHARS = 500
# A summary longer than this is "far over" 500 characters: cut on a sentence.
TOO_LONG_CHARS = 700
MAX_TOPICS = 10
# Newest live messages of a session read for its compact (older ones are in its summary).
SESSION_MESSAGES = 200
# How long a session end waits for the models before going on without them.
WAIT_SECONDS = 10.0
COMPACT_SCHEMA = object_schema(
    "session_compact",
    "A short memory of a finished conversation.",
    {
        "summary": {"type": "string"},
        "topics": {"type": "array", "items": {"type": "string"}},
        "lastAction": {"type": "string"},
    },
)


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
    ended_at: datetime
    """The time of the session's last message: the compact's timestamp and key."""
    rows: list[dict[str, Any]]
    summary: str = ""


def _topics(value: Any) -> list[str]:
    if isinstance(value, str):
        value = re.split(r"[,;\n]", value)
    if not isinstance(value, list):
        return []
    topics = [" ".join(str(t).split())[:60] for t in value if str(t).strip()]
    return list(dict.fromkeys(topics))[:MAX_TOPICS]


def parse_compact(answer: str, data: Any = None) -> Compact:
    """Return the compact in a model's answer, repaired where needed.

    JSON as asked is used as is (`data`: the answer already parsed); a summary far over
    500 characters is cut on a sentence; an answer that is not JSON is kept as a
    plain-text summary.
    """
    data = load_json(answer) if data is None else data
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
        compact.summary = shorten(compact.summary, COMPACT_CHARS)
        compact.repaired = compact.repaired or "summary too long"
    compact.last_action = shorten(compact.last_action, 200)
    if not compact.summary:
        raise ValueError("the compact model returned an empty summary")
    return compact


def fallback_compact(rows: list[dict[str, Any]], summary: str) -> Compact:
    """Build a plain-text compact without the model: what the user wrote, the last answer."""
    asked = [strip_stamp(r["content"]).strip() for r in rows if r["role"] == "user"]
    answers = [r["content"].strip() for r in rows if r["role"] == "assistant" and r["content"]]
    text = "User wrote: " + " | ".join(a for a in asked if a) if asked else summary
    last = shorten(answers[-1], 200) if answers else ""
    return Compact(summary=shorten(text, COMPACT_CHARS), last_action=last, repaired="model failed")


class Compactor:
    """End sessions: extract their facts, compact them into long-term memory (seed 001)."""

    def __init__(
        self, deps: GraphDeps, model: BaseChatModel, wait_seconds: float = WAIT_SECONDS
    ) -> None:
        self.deps = deps
        self.model = model
        self.wait_seconds = wait_seconds
        self._tasks: set[asyncio.Task[Any]] = set()

    async def read_session(
        self, owner_id: int, conversation_id: uuid.UUID, until: datetime | None = None
    ) -> Session | None:
        """Return the session ending at `until` as text for the model (bounded), or None.

        The session is what came after the previous session's end (`ended_at`). Messages
        already in the running summary are represented by it; after /forget both are
        gone, so a forgotten part is never compacted either.
        """
        deps = self.deps
        conv = await deps.conversations.get_conversation(conversation_id)
        if conv is None or conv["telegram_user_id"] != owner_id:
            return None
        until = until or conv["last_message_at"]
        if until is None:
            return None
        rows = await deps.conversations.session_messages(
            conversation_id, conv["ended_at"], until, SESSION_MESSAGES
        )
        summarized = any(r["summarized"] for r in rows)
        rows = [r for r in rows if not r["summarized"]]
        if not any(r["role"] == "user" for r in rows):
            return None
        budget = Layers.for_model(deps.settings, deps.settings.effective_compact_model).working
        per_message = max(64, budget // 8)
        lines: list[str] = []
        left = budget
        for row in reversed(rows):  # the newest matter most: the lastAction
            line = transcript_line(row, per_message, deps.counter)
            left -= deps.counter.count(line) + 1
            if left < 0:
                break
            lines.append(line)
        summary = conv["summary"] if summarized else ""
        parts = ["Summary of the earlier part:\n" + summary] if summary else []
        parts.append("Messages:\n" + "\n".join(reversed(lines)))
        ended = rows[-1]["created_at"]
        return Session(owner_id, conversation_id, "\n\n".join(parts), ended, rows, summary)

    async def store(self, session: Session) -> dict[str, Any] | None:
        """Ask the model for the compact (or build one without it) and store it."""
        prompt = prompts.COMPACT_PROMPT.format(chars=COMPACT_CHARS, conversation=session.text)
        messages = [SystemMessage(prompts.COMPACT_SYSTEM), HumanMessage(prompt)]
        try:
            model = with_output_cap(self.model, COMPACT_TOKENS)
            config = call_config("compact", session.owner_id, session.conversation_id)
            data, raw = await self.deps.json_answers.ask(model, messages, COMPACT_SCHEMA, config)
            compact = parse_compact(raw, data)
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
        return await self._save(session, compact, replace=True)

    async def _save(
        self, session: Session, compact: Compact, replace: bool
    ) -> dict[str, Any] | None:
        row = await self.deps.memory.add_compact(
            session.owner_id,
            session.conversation_id,
            compact.summary,
            compact.topics,
            compact.last_action,
            keep=self.deps.settings.max_compacts,
            created_at=session.ended_at,
            replace=replace,
        )
        logger.info(
            "compacted session of %s in %s (%d chars%s)",
            session.owner_id,
            session.conversation_id,
            len(compact.summary),
            "" if replace else ", plain text while the model is slow",
        )
        return row

    async def end_session(
        self, owner_id: int, conversation_id: uuid.UUID, until: datetime | None = None
    ) -> dict[str, Any] | None:
        """End the session that ends at `until` (default: the last message); return its
        compact (None when the session held no user message).

        Reads everything first (the caller may delete the conversation next), then lets
        the models work for at most `wait_seconds`: a compact the model has not written
        by then is stored as plain text at once and replaced when the model answers, and
        fact extraction goes on in the background. Never raises for a model's failure.

        An owner over their token budget gets the plain-text compact and no model call;
        the session's facts stay pending (extracted later, unless /new wipes them first).
        """
        try:
            conv = await self.deps.conversations.get_conversation(conversation_id)
            until = until or (conv or {}).get("last_message_at")
            session = await self.read_session(owner_id, conversation_id, until)
            pending = await read_pending(
                self.deps, owner_id, conversation_id, limit=WIPE_READ_LIMIT
            )
        except Exception:
            logger.error("ending the session of %s: reading failed", conversation_id, exc_info=True)
            return None
        if not await self.allows(owner_id):
            logger.info("session of %s ends without models: over the token budget", owner_id)
            row = None
            if session is not None:
                fallback = fallback_compact(session.rows, session.summary)
                row = await self._save(session, fallback, replace=True)
            if until is not None:
                await self.deps.memory.mark_session_ended(conversation_id, until)
            return row
        waiting = [self._spawn(self._extract_logged(pending))]
        compacting = self._spawn(self._store_logged(session)) if session else None
        if compacting is not None:
            waiting.append(compacting)
        await asyncio.wait(waiting, timeout=self.wait_seconds)
        row = None
        if session is not None and compacting is not None:
            if compacting.done():
                row = compacting.result()
            else:
                logger.warning("compaction of %s is slow; plain text for now", conversation_id)
                fallback = fallback_compact(session.rows, session.summary)
                row = await self._save(session, fallback, replace=False)
        if until is not None:
            await self.deps.memory.mark_session_ended(conversation_id, until)
        return row

    async def learn_facts(self, owner_id: int, conversation_id: uuid.UUID) -> None:
        """Extract the facts pending in the conversation now, as a session end does.

        For /forget: what the user said before it stays long-term memory, and is read
        now rather than after, when the forgotten text should reach no model. Waits at
        most `wait_seconds`; the rest goes on in the background.
        """
        try:
            pending = await read_pending(
                self.deps, owner_id, conversation_id, limit=WIPE_READ_LIMIT
            )
        except Exception:
            logger.error("reading pending facts of %s failed", conversation_id, exc_info=True)
            return
        if pending and await self.allows(owner_id):
            await asyncio.wait(
                [self._spawn(self._extract_logged(pending))], timeout=self.wait_seconds
            )

    async def allows(self, owner_id: int) -> bool:
        """Tell whether the owner's token budget lets their session end call models."""
        budget = self.deps.budget
        return budget is None or await budget.allows(owner_id)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _store_logged(self, session: Session) -> dict[str, Any] | None:
        try:
            return await self.store(session)
        except Exception:
            logger.error("compaction of %s failed", session.conversation_id, exc_info=True)
            return None

    async def _extract_logged(self, pending: list[Batch]) -> int:
        stored = 0
        for batch in pending:
            try:
                stored += await extract_batch(self.deps, batch)
            except Exception:
                logger.warning(
                    "fact extraction at the end of a session of %s failed",
                    batch.owner_id,
                    exc_info=True,
                )
                break  # the rest stays pending: the next run tries again
        return stored

    async def drain(self) -> None:
        """Wait for session ends still finishing in the background."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
