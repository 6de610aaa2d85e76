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
# What a summary covers when it folded a message the memory model refused, as a placeholder
# (the placeholder is src.graph.memory.summarizer.REFUSED_PLACEHOLDER, a user-visible text).
REFUSED = "refused"
REFUSED_PLACEHOLDER = "[a message the memory model refused]"


def summary_of(request: dict[str, Any]) -> str:
    """Return the running summary a chat request carries ("" when none)."""
    system = message_text(request["messages"][0])
    if prompts.SUMMARY_HEADER not in system:
        return ""
    text = system.split(prompts.SUMMARY_HEADER + "\n", 1)[1].split("\n" + prompts.MEMORY_CLOSE)[0]
    return text.removeprefix(prompts.SUMMARY_CUT_LINE + "\n")  # cut: its newest part


@dataclass
class Ledger:
    """The memory model's answered requests, and what the squashes replaced.

    `covers` maps each summary the model wrote to the tokens it stands for: those of the
    summary it extended, and those of the new messages it read (a shortened summary
    stands for what the summary it shortened stood for).
    """

    answered: list[dict[str, Any]] = field(default_factory=list)
    replaced: dict[str, list[str]] = field(default_factory=dict)
    covers: dict[str, set[str]] = field(default_factory=dict)
    links: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    """Per summary written: the summary it extended, and the tokens it read (user messages
    and squash summaries, expanded when counted)."""

    def reply(self, request: dict[str, Any]) -> str:
        """Answer as the memory model, recording the request (use as a fake reply)."""
        self.answered.append(request)
        answer = memory_reply(request)
        if message_text(request["messages"][0]) == prompts.SUMMARIZER_SYSTEM:
            prompt = message_text(request["messages"][-1])
            self.covers[answer.strip()] = self._covered_by(prompt)
            self.links[answer.strip()] = self._link(prompt)
        return answer

    @staticmethod
    def _link(prompt: str) -> tuple[str, list[str]]:
        if "Current summary" not in prompt:
            return section(prompt, "Summary:\n", "\n\nAnswer with").strip(), []
        old = section(prompt, "Current summary (empty at first):\n", "\n\nNew messages:")
        new = transcript(section(prompt, "New messages:\n", "\n\nRules:"))
        read = [t for role, text in new if role in ("user", "summary") for t in TOKEN.findall(text)]
        return old.strip(), read

    def _answer_for(self, summary: str, table: dict[str, Any]) -> str | None:
        text = summary.strip().removeprefix("… ").strip()
        if text in table:
            return text
        ends = [answer for answer in table if answer.endswith(text)] if text else []
        return ends[-1] if ends else None

    def folded_along(self, summary: str) -> Counter[str]:
        """Count, per user message, the folds along the chain of summaries that made the
        stored `summary` which read the message, itself or through a squash summary (a
        discarded fold is not on it)."""
        counts: Counter[str] = Counter()
        seen: set[str] = set()
        answer = self._answer_for(summary, self.links)
        while answer is not None and answer not in seen:
            seen.add(answer)
            previous, read = self.links[answer]
            counts.update(u for t in read for u in self.expand(t))
            answer = self._answer_for(previous, self.links) if previous != "(empty)" else None
        return counts

    def _covered_by(self, prompt: str) -> set[str]:
        if "Current summary" not in prompt:  # asked to shorten a summary
            return set(self.covered(section(prompt, "Summary:\n", "\n\nAnswer with")))
        old = section(prompt, "Current summary (empty at first):\n", "\n\nNew messages:")
        new = transcript(section(prompt, "New messages:\n", "\n\nRules:"))
        tokens = {
            t for role, text in new if role in ("user", "summary") for t in TOKEN.findall(text)
        }
        if any(REFUSED_PLACEHOLDER in text for _, text in new):
            tokens.add(REFUSED)
        return self.covered(old) | tokens

    def folded_in(self, request: dict[str, Any]) -> set[str]:
        """Return the user-message tokens the summary a chat request carries stands for."""
        return {u for t in self.covered(summary_of(request)) for u in self.expand(t)}

    def covered(self, summary: str) -> set[str]:
        """Return the tokens (unexpanded) a stored or shown summary stands for: that of the
        answer it is, or, cut from its start to fit, the answer it is the end of."""
        text = summary.strip().removeprefix("… ").strip()
        if not text or text == "(empty)":
            return set()
        if text in self.covers:
            return self.covers[text]
        ends = [c for answer, c in self.covers.items() if answer.endswith(text)]
        return ends[-1] if ends else set()

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
