"""Fold messages into the running summary before they leave the window (seed 002).

Each fold reads only the previous summary and a bounded batch of due messages (see
`window.due`), so the summarizer's input does not grow with the conversation. Nothing is
marked summarized unless its content survived:
- a message longer than a call's share is read whole, in parts, each part a call that
  extends the summary the previous part made; the messages are marked once the last
  part is folded;
- a summary over its budget (or cut at the output cap) is asked for again, shorter, up
  to SHORTER_TRIES times; still too long, it is never cut (a cut could drop the batch
  just folded, wherever the model wrote it): the batch is split in halves and each
  folded on its own, and a single message whose fold does not fit stays unfolded
  (SummaryTooLong, retried later like a model error);
- the stored summary and the marks commit together, guarded: a fold whose summary or
  messages changed since it read them (another process folded them, /forget) commits
  nothing;
- a message the memory model refuses (a 4xx: content filter, too large) is found by
  halving the batch and folded as a placeholder, with one warning.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage

from src.config import Settings
from src.graph import prompts
from src.graph.context.budget import Layers, split_text
from src.graph.context.render import row_tokens, transcript_line
from src.graph.deps import GraphDeps
from src.graph.memory.epoch import started
from src.graph.memory.errors import answer_of, is_refusal
from src.graph.memory.window import LAG_FACTOR, WindowRule, due, window_count, window_size
from src.graph.model_calls import call_config
from src.graph.output_caps import summary_tokens, was_cut, with_output_cap
from src.graph.tokens import TokenCounter
from src.storage.squash_repo import unfolded_ids

logger = logging.getLogger(__name__)

# Folds per run at most: catches up after a backlog without running for long.
MAX_ROUNDS = 3
# Tokens of the summarizer's own instructions, reserved out of its model's input budget.
PROMPT_RESERVE = 600
# What stands in the summary for a message the memory model refused.
REFUSED_PLACEHOLDER = "[a message the memory model refused]"
# Times a summary over its budget is asked for again, each time in half the words.
SHORTER_TRIES = 2

Row = dict[str, Any]
# The key of a squash summary row under which `Fold.standing_in` puts the originals the
# summarizer reads in its stead.
ORIGINALS = "originals"


class SummaryTooLong(ValueError):
    """The summary model's summary stayed over its budget, asked again shorter: nothing
    of it is stored (cutting it could drop what was just folded)."""


@dataclass(frozen=True)
class SummaryLimits:
    """Token limits of one summarizer call."""

    summary: int
    """Longest stored summary: two thirds of the summary layer (the rest is for
    previous conversations)."""
    batch: int
    """Most tokens of messages in one call: messages are read whole, one longer than
    this in parts."""
    working: int
    """Working memory of the chat model when the other layers are full."""


def summary_limits(settings: Settings, reserve: int = 0, model: str | None = None) -> SummaryLimits:
    """Return the summarizer's limits for the chat model `model` (default LLM_MODEL);
    `reserve` is what the chat model's tools take."""
    chat = Layers.for_model(settings, model or settings.llm_model, reserve)
    summary = max(64, chat.summary * 2 // 3)
    room = Layers.for_model(settings, settings.effective_summary_model).total
    batch = max(256, min(chat.working, room - summary - PROMPT_RESERVE))
    # What working memory holds even when the other layers use their whole shares.
    working = max(0, min(chat.working, chat.total - chat.system - chat.facts - chat.summary))
    return SummaryLimits(summary, batch, working)


def window_rule(settings: Settings, size: int, limits: SummaryLimits) -> WindowRule:
    """Return the window rule of a conversation whose window holds `size` messages."""
    return WindowRule(
        size, limits.working, settings.summary_trigger, settings.window_step, settings.max_context
    )


def row_lines(row: Row, limits: SummaryLimits, counter: TokenCounter) -> list[str]:
    """Return a message as the summarizer reads it: one `[role]: text` line, or, when it
    is longer than a batch, several lines marked `(part i/n)` that together hold it all.
    A squash summary standing in for `originals` (see `Fold.standing_in`) reads as them."""
    originals = row.get(ORIGINALS)
    if originals is not None:
        lines = [line for o in originals for line in row_lines(o, limits, counter)]
        joined = "\n".join(lines)
        return [joined] if lines and counter.count(joined) <= limits.batch else lines
    whole = transcript_line(row, 10**9, counter)
    if counter.count(whole) <= limits.batch:
        return [whole]
    label, _, text = whole.partition("]: ")
    parts = split_text(text, max(32, limits.batch - 32), counter)
    return [f"{label}]: (part {i}/{len(parts)}) {part}" for i, part in enumerate(parts, 1)]


def take_segments(
    rows: list[Row], limits: SummaryLimits, counter: TokenCounter
) -> tuple[list[Row], list[str]]:
    """Return the oldest rows that make one fold, and its texts (one per model call).

    Whole messages up to a batch's tokens; a longer message alone, in as many parts as
    it takes (each part its own call).
    """
    taken: list[Row] = []
    segments: list[str] = []
    lines: list[str] = []
    used = 0
    for row in rows:
        parts = row_lines(row, limits, counter)
        cost = sum(counter.count(p) + 1 for p in parts)
        if taken and (len(parts) > 1 or used + cost > limits.batch):
            break
        taken.append(row)
        if len(parts) > 1:
            return taken, parts
        lines.extend(parts)
        used += cost
    if lines:
        segments.append("\n".join(lines))
    return taken, segments


async def _ask_summary(
    deps: GraphDeps, prompt: str, cap: int, owner: int | None
) -> tuple[str, bool]:
    """Ask the summary model; return its text and whether it was cut at the cap."""
    model = with_output_cap(deps.summary_model, cap)
    messages = [SystemMessage(prompts.SUMMARIZER_SYSTEM), HumanMessage(prompt)]
    answer = await answer_of(model, messages, call_config("summary", owner))
    return answer.text.strip(), was_cut(answer)


async def update_summary(
    deps: GraphDeps,
    summary: str,
    conversation: str,
    limits: SummaryLimits | None = None,
    owner: int | None = None,
) -> str:
    """Return the running summary extended with `conversation`, within its budget.

    Over the budget (or cut at the output cap), the model is asked for a shorter one, up
    to SHORTER_TRIES times in half the words each; still over, SummaryTooLong.
    """
    limits = limits or summary_limits(deps.settings)
    strategy = deps.settings.summary_strategy
    # About 3 tokens a word: Russian words take two or more with most tokenizers.
    words = max(20, limits.summary // 3)
    prompt = prompts.SUMMARY_PROMPT.format(
        instruction=prompts.SUMMARY_INSTRUCTIONS[strategy],
        summary=summary or "(empty)",
        conversation=conversation,
        words=words,
    )
    cap = summary_tokens(limits.summary)
    text, cut = await _ask_summary(deps, prompt, cap, owner)
    if not text:
        raise ValueError("the summarizer returned an empty summary")
    for _ in range(SHORTER_TRIES):
        if not cut and deps.counter.count(text) <= limits.summary:
            return text
        words = max(10, words // 2)
        again = prompts.SUMMARY_SHORTER.format(words=words, summary=text)
        shorter, cut_again = await _ask_summary(deps, again, cap, owner)
        if shorter and not cut_again and deps.counter.count(shorter) < deps.counter.count(text):
            text, cut = shorter, False
    if cut or deps.counter.count(text) > limits.summary:
        raise SummaryTooLong(
            f"the summary stayed over its budget ({deps.counter.count(text)} tokens of"
            f" {limits.summary}) after asking {SHORTER_TRIES} times for a shorter one"
        )
    return text


@dataclass(frozen=True)
class Fold:
    """Folding one conversation's messages into its running summary."""

    deps: GraphDeps
    conversation_id: uuid.UUID
    owner: int
    limits: SummaryLimits

    async def rows(self, summary: str, rows: list[Row]) -> tuple[str, int]:
        """Fold `rows` (oldest first, all of them) into `summary` and commit; return the
        stored summary and how many rows were marked (none more once the guard finds
        them changed).

        A refusal is narrowed down by halves to the refused message, which is folded as
        a placeholder; a summary that does not fit is folded again in halves. Transient
        errors (and a single message whose fold does not fit) propagate with nothing
        more marked.
        """
        folded = 0
        rows = await self.standing_in(rows)
        while rows:
            taken, segments = take_segments(rows, self.limits, self.deps.counter)
            try:
                text = summary
                for segment in segments:
                    text = await update_summary(self.deps, text, segment, self.limits, self.owner)
            except SummaryTooLong:
                if len(taken) < 2:
                    raise
                logger.info("summary of %s over its budget: folded in halves", self.conversation_id)
                half = len(taken) // 2
                summary, first = await self.rows(summary, taken[:half])
                summary, second = await self.rows(summary, taken[half:])
                folded += first + second
            except Exception as exc:
                if not is_refusal(exc):
                    raise
                summary, done = await self.refused(summary, taken)
                folded += done
            else:
                if not await self.commit(summary, text, taken):
                    return summary, folded
                summary, folded = text, folded + len(taken)
            rows = rows[len(taken) :]
        return summary, folded

    async def standing_in(self, rows: list[Row]) -> list[Row]:
        """Return `rows`, each squash summary whose run the running summary partly holds
        already carrying the originals it still lacks (squash_repo.unfolded_ids): those
        are read in its stead, so nothing reaches the summary twice."""
        wanted = {
            r["id"]: ids
            for r in rows
            if ORIGINALS not in r and (ids := unfolded_ids(r)) is not None
        }
        if not wanted:
            return rows
        every = [i for ids in wanted.values() for i in ids]
        found = await self.deps.conversations.messages_by_id(self.conversation_id, every)
        return [
            {**r, ORIGINALS: [found[i] for i in wanted[r["id"]] if i in found]}
            if r["id"] in wanted
            else r
            for r in rows
        ]

    async def refused(self, summary: str, rows: list[Row]) -> tuple[str, int]:
        """Fold rows one of which the model refused: by halves, the refused one as a
        placeholder (or, refused even so, marked without changing the summary)."""
        if len(rows) > 1:
            half = len(rows) // 2
            summary, first = await self.rows(summary, rows[:half])
            summary, second = await self.rows(summary, rows[half:])
            return summary, first + second
        row = rows[0]
        logger.warning(
            "the summary model refused message %s of %s: folded as a placeholder",
            row["id"],
            self.conversation_id,
        )
        placeholder = f"[{row['role']}]: {REFUSED_PLACEHOLDER}"
        try:
            text = await update_summary(self.deps, summary, placeholder, self.limits, self.owner)
        except Exception as exc:
            if not is_refusal(exc):
                raise
            text = summary
        return (text, 1) if await self.commit(summary, text, rows) else (summary, 0)

    async def commit(self, old: str, new: str, rows: list[Row]) -> bool:
        """Store the new summary with the rows' marks, guarded (see `fold_summary`): also
        against a delete of the owner's memory since the fold's work started (epoch.py)."""
        ids = [r["id"] for r in rows]
        conversations, epoch = self.deps.conversations, started(self.owner)
        if await conversations.fold_summary(self.conversation_id, old, new, ids, epoch=epoch):
            return True
        logger.info(
            "fold of %s dropped: another fold, /forget or a delete of memory came first",
            self.conversation_id,
        )
        return False


async def window_rows(
    deps: GraphDeps, owner: int, conversation_id: uuid.UUID
) -> tuple[Row | None, int, list[Row]]:
    """Return the conversation, its window size (seed 000) and its newest messages in
    thread order: the window and what may lag before it, then older unsummarized ones."""
    conversations = deps.conversations
    conv = await conversations.get_conversation(conversation_id)
    user = await deps.users.get(owner)
    size = window_size(window_count(user, conv), deps.settings.max_context)
    limit = deps.settings.max_context
    rows = await conversations.load_last_messages(conversation_id, limit + 2)
    older = await conversations.unsummarized(conversation_id, limit * (1 + LAG_FACTOR) + 2)
    seen = {r["id"] for r in rows}
    rows = [r for r in older if r["id"] not in seen] + rows
    rows.sort(key=lambda r: (r["created_at"], r["id"]))
    return conv, size, rows


async def summarize_due(
    deps: GraphDeps,
    owner: int,
    conversation_id: uuid.UUID,
    model: str | None = None,
    reserve: int = 0,
) -> int:
    """Fold what is due in the conversation's summary (see `window.due`); return how many
    messages were folded. A transient model error propagates; what was folded stays."""
    limits = summary_limits(deps.settings, reserve, model)
    folded = 0
    for _ in range(MAX_ROUNDS):
        conv, size, rows = await window_rows(deps, owner, conversation_id)
        if conv is None:
            break
        rule = window_rule(deps.settings, size, limits)
        batch = due(rows, rule, lambda r: row_tokens(r, deps.counter))
        if not batch:
            break
        _, done = await Fold(deps, conversation_id, owner, limits).rows(conv["summary"], batch)
        folded += done
        if not done:
            break
        logger.info("summary of %s extended with %d messages", conversation_id, done)
    return folded


async def fold_before(
    deps: GraphDeps,
    owner: int,
    conversation_id: uuid.UUID,
    before: Row,
    model: str | None = None,
    reserve: int = 0,
) -> int:
    """Fold every unsummarized message before the stored message `before` (in thread
    order) now: the turn's own fold when its prompt cannot carry them. Return how many."""
    limits = summary_limits(deps.settings, reserve, model)
    bound = (before["created_at"], before["id"])
    folded = 0
    while True:
        conv = await deps.conversations.get_conversation(conversation_id)
        rows = await deps.conversations.unsummarized(conversation_id, 200)
        rows = [r for r in rows if (r["created_at"], r["id"]) < bound]
        if conv is None or not rows:
            return folded
        _, done = await Fold(deps, conversation_id, owner, limits).rows(conv["summary"], rows)
        if not done:
            return folded
        folded += done
