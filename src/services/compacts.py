"""Session compacts (seed 001): what one is made from, and what the model wrote, repaired.

A compact is `{summary (~500 chars), topics[], lastAction}`, made from the session's own
messages as text (`read_session`), never from the running summary. The model's JSON is
used as is; a summary far over 500 characters is cut on a sentence; an answer that is not
JSON is kept as a plain-text summary. Without the model (it failed, is slow, or the owner
is over budget) a plain-text compact is built from what the user wrote and the last answer.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from src.graph.context.budget import Layers, shorten
from src.graph.context.render import transcript_line
from src.graph.deps import GraphDeps
from src.graph.memory.structured import load_json, object_schema
from src.graph.timestamps import strip_stamp

logger = logging.getLogger(__name__)

COMPACT_CHARS = 500
# A summary longer than this is "far over" 500 characters: cut on a sentence.
TOO_LONG_CHARS = 700
MAX_TOPICS = 10
# Newest live messages of a session read for its compact, in at most COMPACT_PARTS calls
# of the compact model (each the model's working-memory budget); older ones are left out.
SESSION_MESSAGES = 400
COMPACT_PARTS = 4
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
    """What a compact is made from: the session's own messages as text, and when it ended."""

    owner_id: int
    conversation_id: uuid.UUID
    parts: list[str]
    """The session's messages as `[role]: text` lines, in parts that each fit one call of
    the compact model, oldest first."""
    ended_at: datetime
    """The time of the session's last message: the compact's timestamp and key."""
    rows: list[dict[str, Any]]


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


def fallback_compact(rows: list[dict[str, Any]]) -> Compact:
    """Build a plain-text compact without the model: what the user wrote, the last answer."""
    asked = [strip_stamp(r["content"]).strip() for r in rows if r["role"] == "user"]
    answers = [r["content"].strip() for r in rows if r["role"] == "assistant" and r["content"]]
    text = "User wrote: " + " | ".join(a for a in asked if a)
    last = shorten(answers[-1], 200) if answers else ""
    return Compact(summary=shorten(text, COMPACT_CHARS), last_action=last, repaired="model failed")


async def read_session(
    deps: GraphDeps, owner_id: int, conversation_id: uuid.UUID, until: datetime | None = None
) -> Session | None:
    """Return the session ending at `until` as text for the model (bounded), or None when
    it holds no user message.

    The session is its own live messages: those after the previous session's end
    (`ended_at`), folded into the running summary or not. The summary is never read: it
    covers earlier sessions too, whose compacts a 🗑 may have deleted, and what came
    before a `/memory clear` or a /forget (both end the session where it is, without a
    compact: what came before them is in no session).
    """
    conv = await deps.conversations.get_conversation(conversation_id)
    if conv is None or conv["telegram_user_id"] != owner_id:
        return None
    until = until or conv["last_message_at"]
    if until is None:
        return None
    rows = await deps.conversations.session_messages(
        conversation_id, conv["ended_at"], until, SESSION_MESSAGES
    )
    if not any(r["role"] == "user" for r in rows):
        return None
    budget = Layers.for_model(deps.settings, deps.settings.effective_compact_model).working
    per_message = max(64, budget // 8)
    lines: list[tuple[str, int]] = []
    left = budget * COMPACT_PARTS
    for row in reversed(rows):  # the newest matter most: the lastAction
        line = transcript_line(row, per_message, deps.counter)
        cost = deps.counter.count(line) + 1
        left -= cost
        if left < 0:
            logger.info("compact of %s: its oldest messages left out", conversation_id)
            break
        lines.append((line, cost))
    lines.reverse()
    return Session(owner_id, conversation_id, _parts(lines, budget), rows[-1]["created_at"], rows)


def _parts(lines: list[tuple[str, int]], budget: int) -> list[str]:
    """Return `lines` (text, tokens) joined in parts of at most `budget` tokens, in order."""
    parts: list[list[str]] = [[]]
    used = 0
    for line, cost in lines:
        if parts[-1] and used + cost > budget:
            parts.append([])
            used = 0
        parts[-1].append(line)
        used += cost
    return ["\n".join(part) for part in parts]
