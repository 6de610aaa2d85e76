"""Account for what reached the summary model: which user messages, how many times.

Tests name every user message with a token (`u12`) and every squash summary with one
(`S3`). A squash summary stands for the messages it replaced (from `squash_log`), which
may include earlier squash summaries. `Ledger` records the memory model's successful
answers (failed requests never folded anything) and counts, per user-message token, how
many summarizer inputs carried it, itself or through a squash summary.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from src.graph import prompts
from tests.fakes.memory_model import memory_reply, section, transcript
from tests.fakes.openai_server import message_text

TOKEN = re.compile(r"\b([uS]\d+)\b")


@dataclass
class Ledger:
    """The memory model's answered requests, and what the squashes replaced."""

    answered: list[dict[str, Any]] = field(default_factory=list)
    replaced: dict[str, list[str]] = field(default_factory=dict)

    def reply(self, request: dict[str, Any]) -> str:
        """Answer as the memory model, recording the request (use as a fake reply)."""
        self.answered.append(request)
        return memory_reply(request)

    def of_kind(self, system: str) -> list[dict[str, Any]]:
        """Return the answered requests with this system prompt."""
        return [r for r in self.answered if message_text(r["messages"][0]) == system]

    def expand(self, token: str) -> list[str]:
        """Return the user-message tokens a token stands for (a squash: its originals)."""
        if token.startswith("u"):
            return [token]
        return [u for t in self.replaced.get(token, []) for u in self.expand(t)]

    def tokens(self, text: str) -> list[str]:
        """Return the user-message tokens in a text, squash summaries expanded."""
        return [u for t in TOKEN.findall(text) for u in self.expand(t)]

    def summarized(self, upto: int | None = None) -> Counter[str]:
        """Count, per user message, the summarizer inputs that carried it (among the
        first `upto` answered requests)."""
        counts: Counter[str] = Counter()
        answered = self.answered[:upto] if upto is not None else self.answered
        for request in answered:
            if message_text(request["messages"][0]) != prompts.SUMMARIZER_SYSTEM:
                continue
            new = section(message_text(request["messages"][-1]), "New messages:\n", "\n\nRules:")
            for role, text in transcript(new):
                if role in ("user", "summary"):
                    counts.update(self.tokens(text))
        return counts

    async def learn_squashes(self, pool: Any, conversation_ids: list[uuid.UUID]) -> None:
        """Read which messages each squash replaced (squash summaries are `S<n>`)."""
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT l.summary, array_agg(m.content ORDER BY m.created_at, m.id) AS texts"
                " FROM squash_log l JOIN messages m ON m.id = ANY(l.replaced_ids)"
                " WHERE l.conversation_id = ANY(%s)"
                " AND (m.role = 'user' OR m.meta ? 'frs_summary')"
                " GROUP BY l.id, l.summary",
                (conversation_ids,),
            )
            for row in await cur.fetchall():
                originals = [t for text in row["texts"] for t in TOKEN.findall(text)]
                self.replaced[row["summary"].strip()] = originals
