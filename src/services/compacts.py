"""Session compacts (seed 001): what one is made from, and what the model wrote, repaired.

A compact is `{summary (~500 chars), topics[], lastAction}`, made from the session's
messages as text (`read_session`). The model's JSON is used as is; a summary far over
500 characters is cut on a sentence; an answer that is not JSON is kept as a plain-text
summary. Without the model (it failed, is slow, or the owner is over budget) a plain-text
compact is built from what the user wrote and the last answer.
"""

from __future__ import annotations

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

COMPACT_CHARS = 500
# A summary longer than this is "far over" 500 characters: cut on a sentence.
TOO_LONG_CHARS = 700
MAX_TOPICS = 10
# Newest live messages of a session read for its compact (older ones are in its summary).
SESSION_MESSAGES = 200
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


async def read_session(
    deps: GraphDeps, owner_id: int, conversation_id: uuid.UUID, until: datetime | None = None
) -> Session | None:
    """Return the session ending at `until` as text for the model (bounded), or None.

    The session is what came after the previous session's end (`ended_at`). Messages
    already in the running summary are represented by it; after /forget both are
    gone, so a forgotten part is never compacted either.
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
