"""Seed 000's `remind_of_yourself`: one short message to users who have gone quiet.

A user with reminders on who has been silent for REMIND_AFTER_HOURS gets one message,
written by the chat model from what the bot remembers of them (a fixed text if the model
fails), stored as an assistant message. The silence is marked before sending, so it is
answered at most once even if sending fails; a chat that can no longer be reached (it
blocked the bot) is not reminded until it writes again, and its /mute stays as the user
set it (src/services/reachability.py). Group chats are never reminded, nor users the
current allowlist no longer admits (the caller's `admits`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from src.graph.context.render import reply_text, transcript_line
from src.graph.context.sections import fact_line
from src.graph.deps import GraphDeps
from src.graph.lang import lang_of
from src.graph.memory.window import window_size
from src.graph.model_calls import call_config
from src.graph.output_caps import REMINDER_TOKENS, was_cut, with_output_cap
from src.services.reachability import chat_unreachable
from src.services.texts import t
from src.services.turn_lock import TurnLocks

logger = logging.getLogger(__name__)

RECENT_MESSAGES = 12
MAX_REMINDER_CHARS = 600
LANGUAGE_NAMES = {"ru": "Russian", "en": "English"}

# Tokens of one recent message shown to the reminder's model.
MESSAGE_TOKENS = 150
REMINDER_SYSTEM = """You are a personal assistant in Telegram. The user has not written \
to you for a while. Write ONE short message (one or two sentences) to remind them of \
yourself: refer to something concrete from your past conversation if there is anything, \
and invite them to continue. Write in {language} unless the conversation shows the user \
writes in another language. No greeting formulas, no apologies, no lists, no placeholders; \
reply with the message text only."""
REMINDER_MEMORY = """What you remember about this user.

Summary of the conversation:
{summary}

Known facts:
{facts}

Last messages:
{messages}"""


class RecipientGone(Exception):
    """The chat cannot receive messages any more (the user blocked the bot, deleted it)."""


Send = Callable[[int, str], Awaitable[None]]


@dataclass
class ReminderStats:
    """What one pass over the due users did."""

    due: int = 0
    sent: int = 0  # delivered, written by the model
    templates: int = 0  # delivered, the fixed text (the model failed)
    unreachable: int = 0  # refused (the user blocked the bot): not reminded till they write
    skipped: int = 0  # groups, and users who wrote or muted meanwhile
    refused: int = 0  # users the allowlist no longer admits
    over_budget: int = 0  # over their token budget: due again when it resets
    failed: int = 0


class ReminderService:
    """Find users to remind, write their reminder, send it once, and store it."""

    def __init__(
        self,
        deps: GraphDeps,
        locks: TurnLocks | None = None,
        model: BaseChatModel | None = None,
        concurrency: int = 4,
        batch: int = 100,
    ) -> None:
        self.deps = deps
        self.settings = deps.settings
        self.locks = locks or TurnLocks(deps.conversations.pool)
        self.model = model or deps.chat_model
        self.concurrency = concurrency
        self.batch = batch

    async def run_once(
        self, send: Send, admits: Callable[[int], bool] | None = None
    ) -> ReminderStats:
        """Remind every user who is due now and `admits` lets in; return what happened."""
        now = self.deps.clock()
        silent_since = now - timedelta(hours=self.settings.remind_after_hours)
        stats = ReminderStats()
        users = await self._due(silent_since, stats)
        stats.due = len(users) + stats.over_budget
        gate = asyncio.Semaphore(self.concurrency)

        async def one(user: dict[str, Any]) -> None:
            async with gate:
                try:
                    if admits is None or admits(int(user["telegram_user_id"])):
                        outcome = await self.remind(user, send, silent_since)
                    else:
                        outcome = await self.refuse(user)
                except Exception:
                    logger.exception("reminder for %s failed", user["telegram_user_id"])
                    outcome = "failed"
            setattr(stats, outcome, getattr(stats, outcome) + 1)

        await asyncio.gather(*(one(user) for user in users))
        if users:
            logger.info(
                "reminders due=%d sent=%d templates=%d unreachable=%d skipped=%d refused=%d "
                "over_budget=%d failed=%d",
                stats.due,
                stats.sent,
                stats.templates,
                stats.unreachable,
                stats.skipped,
                stats.refused,
                stats.over_budget,
                stats.failed,
            )
        return stats

    async def _due(self, silent_since: Any, stats: ReminderStats) -> list[dict[str, Any]]:
        """Return up to a batch of due users within their token budget, counting the others
        in `stats`: paging past them keeps them from filling every batch until it resets."""
        deps = self.deps
        found: list[dict[str, Any]] = []
        after: dict[str, Any] | None = None
        while len(found) < self.batch:
            page = await deps.users.due_reminders(silent_since, self.batch, after=after)
            for user in page:
                owner = int(user["telegram_user_id"])
                if owner > 0 and deps.budget is not None and not await deps.budget.allows(owner):
                    stats.over_budget += 1  # not marked: reminded once the budget allows
                else:
                    found.append(user)
            if len(page) < self.batch:
                break
            after = page[-1]
        return found[: self.batch]

    async def remind(self, user: dict[str, Any], send: Send, silent_since: Any) -> str:
        """Remind one user; return the ReminderStats field to count it under."""
        deps, owner = self.deps, int(user["telegram_user_id"])
        if owner < 0:
            # A group chat: reminding a whole group of itself would be noise.
            await deps.users.mark_reminded(owner, deps.clock())
            return "skipped"
        if deps.budget is not None and not await deps.budget.allows(owner):
            return "over_budget"  # not marked: reminded once the budget allows
        conversation_id = await deps.conversations.get_or_create_conversation(owner)
        text, from_model = await self.compose(user, conversation_id)
        async with self.locks.hold(owner):
            fresh = await deps.users.get(owner)
            if (
                fresh is None
                or fresh["remind_of_yourself"] == "0"
                or fresh["unreachable_since"] is not None
                or fresh["last_seen_at"] is None
                or fresh["last_seen_at"] >= silent_since
                # Another process (a second bot or a worker) reminded them meanwhile.
                or (
                    fresh["last_reminded_at"] is not None
                    and fresh["last_reminded_at"] >= fresh["last_seen_at"]
                )
            ):
                return "skipped"  # they wrote, muted or blocked the bot meanwhile
            # Marked before sending: a failure below loses this reminder, never doubles it.
            await deps.users.mark_reminded(owner, deps.clock())
            try:
                await send(owner, text)
            except RecipientGone as exc:
                await self.recipient_gone(owner, exc)
                return "unreachable"
            # Storing it advances seed 000's window counter too.
            await deps.conversations.append_message(
                conversation_id, "assistant", text, {"reminder": True}
            )
        return "sent" if from_model else "templates"

    async def refuse(self, user: dict[str, Any]) -> str:
        """Let a silence of a user the allowlist no longer admits pass unanswered.

        Marked as answered, like a group's, so it never comes due again; no model call.
        """
        await self.deps.users.mark_reminded(int(user["telegram_user_id"]), self.deps.clock())
        return "refused"

    async def recipient_gone(self, owner_id: int, reason: object) -> None:
        """A chat refuses the bot's messages (it blocked the bot): unreachable, and so not
        reminded, until it writes again; /mute stays as the user set it."""
        await chat_unreachable(self.deps.users, owner_id, reason)

    async def compose(self, user: dict[str, Any], conversation_id: uuid.UUID) -> tuple[str, bool]:
        """Return the reminder text and whether the model wrote it (else the template)."""
        language = user.get("language_code")
        try:
            messages = await self._prompt(user, conversation_id)
            model = with_output_cap(self.model, REMINDER_TOKENS)
            config = call_config("reminder", int(user["telegram_user_id"]), conversation_id)
            answer = await asyncio.wait_for(
                model.ainvoke(messages, config), timeout=self.settings.llm_timeout
            )
            text = reply_text(answer).strip().strip('"«»').strip()
            # A reminder cut mid-sentence by the cap is not sent: the template is better.
            if text and len(text) <= MAX_REMINDER_CHARS and not was_cut(answer):
                return text, True
            logger.warning("reminder for %s: unusable model answer", user["telegram_user_id"])
        except Exception as exc:
            logger.warning(
                "reminder for %s: model failed (%s: %s), using the template",
                user["telegram_user_id"],
                type(exc).__name__,
                exc,
            )
        return t("reminder", language), False

    async def _prompt(self, user: dict[str, Any], conversation_id: uuid.UUID) -> list[Any]:
        deps, owner = self.deps, int(user["telegram_user_id"])
        window = min(
            RECENT_MESSAGES,
            window_size(user.get("active_messages_count"), self.settings.max_context),
        )
        rows = await deps.conversations.load_last_messages(conversation_id, window)
        conv = await deps.conversations.get_conversation(conversation_id)
        facts = await deps.memory.list_facts(owner, 10)
        lines = [
            transcript_line(row, MESSAGE_TOKENS, deps.counter)
            for row in rows
            if row["role"] in ("user", "assistant")
        ]
        memory = REMINDER_MEMORY.format(
            summary=(conv or {}).get("summary") or "-",
            facts="\n".join(fact_line(f) for f in facts) or "-",
            messages="\n".join(lines) or "-",
        )
        language = LANGUAGE_NAMES[lang_of(user.get("language_code"))]
        return [SystemMessage(REMINDER_SYSTEM.format(language=language)), HumanMessage(memory)]
