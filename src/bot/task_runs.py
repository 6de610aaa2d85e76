"""Scheduled tasks at their time (issue 35): each slot claimed once, then run as a turn of
the owner's conversation, its answer through the outbox.

Two procrastinate jobs per run, on the inbox's queue. `due` (task `tgagent.task_due`,
scheduled at the slot) claims the slot in one transaction (src/storage/tasks_repo.py):
the claim's row, the run's inbox row with its chat's job, and the next slot's job. The
chat's job then runs like a stored update (src/bot/queue.py): behind the chat's other
updates (their lock), its note stored once and linked to the run, its reply kept in the
outbox; a worker that dies mid-run leaves it to the next one, which only sends a reply
already stored. A slot missed while everything was down is claimed on start, once,
marked late; a repeating task's next slot then comes from now, so missed slots collapse
into that one run.

A run's note is the user's own instruction, time-stamped like their messages and framed
as their scheduled task: a user message, never a system instruction. Runs of owners the
allowlist no longer admits are refused and those of muted users (/mute) skipped: their
slot is claimed, nothing runs, a repeating task goes on to its next slot.

A chat Telegram refuses (403: the user blocked the bot; src/services/reachability.py) is
not muted, and what is due for it is kept, never consumed unseen: a one-time task runs
and its answer is held, headed with its due time, until the chat writes again (then it
is sent first); a repeating task's slots are missed (not run, or their answer not sent)
and counted on the task, which /tasks shows until one of its answers arrives again.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from src.bot.state import BotState
from src.graph.rights import Role
from src.graph.timestamps import zone_named
from src.services.agent_service import DB_ERRORS, Identity
from src.services.task_times import next_slot
from src.services.texts import t
from src.storage.delivery_repo import Delivery, Reply
from src.storage.tasks_repo import TaskRepository

logger = logging.getLogger(__name__)

# A slot claimed this long after its time (everything was down, or the queue was busy)
# is run marked late: the note says when it was due.
LATE_SECONDS = 60.0


class TaskRunner:
    """Claim due slots and run the claimed ones through the bot's Application."""

    def __init__(self, app: Any, state: BotState) -> None:
        self.app = app
        self.state = state
        self.repo = TaskRepository(state.service.deps.conversations.pool)

    async def due(self, task_id: int, slot: str) -> None:
        """Claim the task's slot (the job scheduled at it): decide whether it runs, store
        its run and defer the next slot, all at once."""
        when = datetime.fromisoformat(slot)
        now = datetime.now(UTC)
        late = (now - when).total_seconds() > LATE_SECONDS

        async def decide(task: dict[str, Any]) -> tuple[str, bool, datetime | None]:
            owner = int(task["owner_id"])
            user = await self.state.service.deps.users.get(owner)
            if not self.state.access.admits_task(owner, task["requested_by"]):
                outcome = "refused"
            elif user is not None and user["remind_of_yourself"] == "0":
                outcome = "muted"
            elif task["repeat"] and user is not None and user["unreachable_since"] is not None:
                outcome = "missed"  # a one-time task runs: its answer waits for the chat
            else:
                outcome = "run"
            following = None
            if task["repeat"]:
                zone = zone_named(task["timezone"]) or self.state.settings.zone
                following = next_slot(task["repeat"], zone, max(now, when))
            return outcome, late, following

        claim = await self.repo.claim(task_id, when, decide)
        if claim is not None:
            logger.info(
                "task %s slot %s claimed%s: %s; next %s",
                task_id,
                slot,
                " (late)" if late else "",
                "runs" if claim.update_id is not None else "not run",
                claim.next_at.isoformat() if claim.next_at else "none",
            )

    async def run(self, update_id: int, info: dict[str, Any]) -> None:
        """Run a claimed slot (its inbox row `update_id`) as a turn of the owner's
        conversation, and deliver its answer."""
        state, deps = self.state, self.state.service.deps
        task = await self.repo.get(int(info["task_id"]))
        if task is None:
            return  # erased (/erase) since it was claimed
        owner, lang = int(task["owner_id"]), task["language_code"]
        if (
            task["status"] == "cancelled"
            and await deps.delivery.stored_message_id(update_id) is None
        ):
            logger.info("task %s was cancelled before its run", task["id"])
            return
        if not state.access.admits_task(owner, task["requested_by"]):
            logger.info("task %s of %s not run: the allowlist refuses it", task["id"], owner)
            return
        zone = zone_named(task["timezone"]) or state.settings.zone
        late = ""
        if info.get("late"):
            due_at = datetime.fromisoformat(info["slot"]).astimezone(zone)
            late = t("task_late", lang, slot=f"{due_at:%Y-%m-%d %H:%M}")
        note = t("task_note", lang, id=task["id"], late=late, text=task["instruction"])
        topic = int(task["topic_id"] or 0)
        # A group's task is charged to the member who asked for it too, as their turns are.
        # A run acts like a plain member: it reads memory and keeps facts, and changes
        # nothing else (no task schedules another: src/graph/rights.py).
        identity = Identity(
            owner,
            language_code=lang,
            sender_id=task["requested_by"],
            topic_id=topic,
            role=Role.TASK,
        )
        delivery = Delivery(
            update_id, owner, topic or None, None, state.settings.telegram_reply_format
        )
        async with state.order.hold(owner):
            result = await state.service.handle_message(identity, note, delivery=delivery)
            if not result.ok:
                delivery = replace(delivery, fmt="plain")
            try:
                # Stored already with the reply (save_response), unless the turn failed.
                await deps.delivery.add_reply(delivery, result.reply)
                reply = await deps.delivery.reply(update_id)
            except DB_ERRORS:
                logger.error("outbox unavailable: task %s's answer goes unsent", task["id"])
                raise
            if reply is not None:
                await self.deliver(info, reply, task)

    async def deliver(
        self, info: dict[str, Any], reply: Reply, task: dict[str, Any] | None = None
    ) -> None:
        """Send a run's stored answer, unless its chat cannot be reached: then a one-time
        task's answer is held for the chat's return and a repeating task's slot counted
        as missed. Telegram refusing it (403) finds the chat unreachable the same way."""
        if task is None:
            task = await self.repo.get(int(info["task_id"]))
        outbox, bot = self.state.outbox, self.app.bot
        if task is None:  # ended and pruned since: its answer is all there is
            await outbox.deliver(bot, reply)
            return
        if await self._set_aside(info, reply, task):
            return
        status = await outbox.deliver(bot, reply)
        # Refused (403): the outbox marked the chat unreachable, so what can be kept is.
        if status == "blocked" and not await self._set_aside(info, reply, task):
            # The chat wrote again since Telegram refused it: once more.
            await self.state.service.deps.delivery.reopen(reply)
            status = await outbox.deliver(bot, reply)
            if status == "blocked":
                await self._set_aside(info, reply, task)
        if status == "sent" and task["repeat"]:
            await self.repo.arrived(int(task["id"]))  # no slot counts as missed any more

    async def _set_aside(self, info: dict[str, Any], reply: Reply, task: dict[str, Any]) -> bool:
        """While the chat is marked unreachable, hold a one-time task's answer, or count a
        repeating task's slot missed; return whether it did."""
        delivery = self.state.service.deps.delivery
        slot = datetime.fromisoformat(info["slot"])
        if task["repeat"]:
            if not await delivery.set_aside(reply, "blocked"):
                return False
            await self.repo.missed(int(task["id"]), slot)
            logger.info("task %s slot %s missed: its chat cannot be reached", task["id"], slot)
            return True
        zone = zone_named(task["timezone"]) or self.state.settings.zone
        due = f"{slot.astimezone(zone):%Y-%m-%d %H:%M}"
        header = t("task_held", task["language_code"], slot=due)
        if not await delivery.set_aside(reply, "held", header):
            return False
        logger.info("task %s's answer held: its chat cannot be reached", task["id"])
        return True
