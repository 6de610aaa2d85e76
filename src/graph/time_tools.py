"""Time as tools: the owner's time zone (`set_timezone`, when the user says where they
are) and scheduled tasks (`schedule_task`, `cancel_task`: issue 35).

Like every tool, they act on the turn's owner only (`user_id` from the injected state,
never from the model's arguments), and only when the person who wrote the turn may
(src/graph/rights.py: in a group, its administrators; never a task's own run). A task's
instruction is the user's text: when it runs, it comes back as the user's message of a
turn, never as a system instruction.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import InjectedState

from src.graph.deps import GraphDeps
from src.graph.rights import Action, may, refusal, role_of
from src.graph.timestamps import owner_zone, zone_named
from src.services.task_times import BadTime, check_cron, parse_when
from src.storage.tasks_repo import TaskRepository

State = Annotated[dict[str, Any], InjectedState]
# Longest instruction a task keeps: a reminder or a request, not a document.
MAX_INSTRUCTION_CHARS = 1000


def make_time_tools(deps: GraphDeps) -> list[BaseTool]:
    """Build set_timezone, schedule_task and cancel_task over the injected pool."""
    tasks = TaskRepository(deps.conversations.pool)
    settings = deps.settings

    @tool
    async def set_timezone(zone: str, state: State) -> str:
        """Set the user's time zone when they say where they are ("I moved to Berlin").

        Args:
            zone: an IANA name, e.g. Europe/Berlin.
        """
        if not may(role_of(state), Action.TIMEZONE):
            return refusal(role_of(state), Action.TIMEZONE)
        found = zone_named(zone)
        if found is None:
            return f"Error: {zone!r} is not an IANA time zone name (like Europe/Berlin)."
        await deps.users.set_timezone(state["user_id"], found.key)
        if deps.budget is not None:
            deps.budget.forget_zone(state["user_id"])
        return f"The user's time zone is now {found.key}."

    @tool
    async def schedule_task(
        when: str, instruction: str, state: State, repeat: str | None = None
    ) -> str:
        """Schedule a reminder or a task the user asks for, once or repeating. At its
        time the instruction comes back to you as the user's message, to act on.

        Args:
            when: first run, in the user's time zone: ISO (2026-12-01T09:00) or a phrase
                ("in 10 minutes", "tomorrow at 9:00").
            instruction: what to do then, in the user's words.
            repeat: a cron expression for repeats ("0 18 * * 5": Fridays 18:00); omit
                for one run.
        """
        if not deps.tasks_run:
            return (
                "Error: scheduled tasks are run and delivered by the Telegram bot; this is "
                "the terminal chat, where no task runs. Tell the user you cannot remind "
                "them or act later here."
            )
        if not may(role_of(state), Action.TASKS):
            return refusal(role_of(state), Action.TASKS)
        owner = state["user_id"]
        text = " ".join((instruction or "").split())
        if not text:
            return "Error: the instruction is empty: say what to do then."
        if len(text) > MAX_INSTRUCTION_CHARS:
            return f"Error: the instruction is longer than {MAX_INSTRUCTION_CHARS} characters."
        zone = owner_zone(await deps.users.get(owner), settings)
        now = deps.clock()
        try:
            first = parse_when(when, zone, now)
            cron = None
            if repeat and repeat.strip() and repeat.strip().lower() not in ("none", "null"):
                cron = check_cron(repeat, zone, now, settings.min_task_interval)
        except BadTime as exc:
            return f"Error: {exc}."
        topic = 0
        if state.get("conversation_id"):
            row = await deps.conversations.get_conversation(
                uuid.UUID(str(state["conversation_id"]))
            )
            topic = int(row["topic_id"]) if row is not None else 0
        values = {
            "owner_id": owner,
            "topic_id": topic,
            "language_code": state.get("language"),
            "instruction": text,
            "repeat": cron,
            "timezone": zone.key,
            # In a group, the member who asked: the runs spend their budget too.
            "requested_by": state.get("member_id") or None,
        }
        task = await tasks.create(values, first, settings.max_tasks)
        if task is None:
            return (
                f"Error: the user has {settings.max_tasks} active tasks, the most allowed: "
                "they can cancel one (/tasks) first."
            )
        local = first.astimezone(zone)
        again = f", then repeats by cron {cron!r}" if cron else ""
        return (
            f"Scheduled task #{task['id']}: first run {local:%Y-%m-%d %H:%M:%S} "
            f"({zone.key}){again}. The user sees their tasks with /tasks."
        )

    @tool
    async def cancel_task(id: int, state: State) -> str:
        """Cancel one of the user's scheduled tasks.

        Args:
            id: the task's number.
        """
        if not may(role_of(state), Action.TASKS):
            return refusal(role_of(state), Action.TASKS)
        if await tasks.cancel(state["user_id"], int(id)):
            return f"Task #{id} is cancelled."
        active = await tasks.active(state["user_id"])
        known = ", ".join(f"#{t['id']}: {t['instruction'][:60]}" for t in active) or "none"
        return f"The user has no active task #{id}. Their active tasks: {known}."

    return [set_timezone, schedule_task, cancel_task]
