"""Who may do what: one table for commands, buttons and the model's tools.

A turn carries the role of the person who wrote it (`Role`), decided once by the bot where
the update arrives (src/bot/rights.py): the user of a private chat owns it; in a group,
its administrators change the group's memory and settings and its other members only
talk, read and keep their own facts; a scheduled task's run acts like a plain member (it
reads memory and keeps facts, and changes nothing else: no task schedules another); the
terminal chat's user owns their memory. A command, a button and the model's tool call
that do the same thing ask `may` the same question; a refused tool call tells the model
why (`refusal`), so it can tell the user.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class Role(StrEnum):
    """The rights a turn, a command or a button press acts with."""

    OWNER = "owner"
    """The user of a private chat (their own memory)."""
    ADMIN = "admin"
    """A group's creator or administrator, or an administrator writing as the group."""
    MEMBER = "member"
    """Anyone else writing in a group."""
    TASK = "task"
    """A scheduled task's run."""
    TERMINAL = "terminal"
    """The user of the terminal chat (`tgagent chat`)."""


class Action(StrEnum):
    """Everything with an effect that a command, a button or a tool can ask for."""

    OWN_FACTS = "own_facts"
    """Remember, correct or forget facts about oneself (in a group: the member's own)."""
    COMPRESS = "compress"
    """Compress the conversation's context (/compress, compress_last, compress_range)."""
    CHANGE_CHAT = "change_chat"
    """Wipe or rewrite the chat's memory or settings (/new, /forget, /memory clear, its
    buttons, /model, /export, /erase)."""
    TIMEZONE = "timezone"
    """Set the chat's time zone (/tz NAME, set_timezone)."""
    TASKS = "tasks"
    """Schedule or cancel the chat's tasks (schedule_task, cancel_task, the /tasks
    buttons)."""


EVERYONE = frozenset(Role)
OWNERS = frozenset({Role.OWNER, Role.ADMIN, Role.TERMINAL})
ALLOWED: dict[Action, frozenset[Role]] = {
    Action.OWN_FACTS: EVERYONE,
    Action.COMPRESS: OWNERS,
    Action.CHANGE_CHAT: OWNERS,
    Action.TIMEZONE: OWNERS,
    Action.TASKS: OWNERS,
}

REFUSALS = {
    Role.MEMBER: (
        "Refused: only the group's administrators may {what} here; the person writing is "
        "a member, not an administrator. Tell them so (an administrator can do it)."
    ),
    Role.TASK: (
        "Refused: a scheduled task's run may not {what}; only the person, in a message of "
        "their own, can. Say so in the answer."
    ),
}
WHAT = {
    Action.OWN_FACTS: "change remembered facts",
    Action.COMPRESS: "compress the conversation",
    Action.CHANGE_CHAT: "change this chat's memory",
    Action.TIMEZONE: "change the time zone",
    Action.TASKS: "schedule or cancel tasks",
}


def may(role: Role | str | None, action: Action) -> bool:
    """Tell whether `role` may do `action`; an unknown or missing role may do only what
    everyone may (a turn whose role is not known acts as a plain member)."""
    try:
        known = Role(role) if role is not None else Role.MEMBER
    except ValueError:
        known = Role.MEMBER
    return known in ALLOWED[action]


def role_of(state: Mapping[str, Any]) -> Role:
    """Return the role a turn's state carries (a plain member's when it carries none:
    a thread checkpointed before roles existed)."""
    try:
        return Role(state.get("role") or Role.MEMBER)
    except ValueError:
        return Role.MEMBER


def refusal(role: Role | str | None, action: Action) -> str:
    """Return what a refused tool call tells the model."""
    template = REFUSALS.get(Role.TASK if role == Role.TASK else Role.MEMBER, "")
    return template.format(what=WHAT[action])
