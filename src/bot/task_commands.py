"""/tz and /tasks: the chat owner's time zone, and their scheduled tasks with a cancel
button each (the press is handled where presses arrive, src/bot/receive.py).

Both act on the chat's memory owner: the user in a private chat, the group in a group,
where only its administrators may change them.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from telegram import Bot, CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.error import TelegramError

from src.bot.chats import identity_of, is_private
from src.bot.commands import (
    Context,
    lang_of_message,
    may_change_memory,
    message_of,
    pressing_owner,
    say,
)
from src.bot.state import BotState, state_of
from src.graph.rights import Action
from src.graph.timestamps import own_zone, owner_zone, zone_named
from src.services.texts import t
from src.storage.tasks_repo import TaskRepository

logger = logging.getLogger(__name__)

# The data of a /tasks cancel button: "task:<id>".
TASK_DATA = "task:"
# Characters of an instruction /tasks shows.
INSTRUCTION_SHOWN = 120


def local_now(zone: object) -> str:
    """Return the time now in `zone`, as the bot says it."""
    return f"{datetime.now(tz=zone):%Y-%m-%d %H:%M}"  # type: ignore[arg-type]


async def cmd_tz(update: Update, context: Context) -> None:
    """/tz: say the owner's time zone; /tz NAME: set it (an IANA name, checked)."""
    message, state = message_of(update), state_of(context)
    lang, owner = lang_of_message(message), identity_of(message).owner_id
    users = state.service.deps.users
    if not context.args:
        own = own_zone(await users.get(owner))
        zone = own or state.settings.zone
        key = "tz_show" if own is not None else "tz_default"
        if not is_private(message):
            key += "_group"  # the group's zone, not the member's
        await say(message, t(key, lang, zone=zone.key, now=local_now(zone)))
        return
    wanted = " ".join(context.args)
    found = zone_named(wanted)
    if found is None:
        await say(message, t("tz_unknown", lang, zone=wanted[:60]))
        return
    if not await may_change_memory(message, context, Action.TIMEZONE):
        return
    await users.set_timezone(owner, found.key)
    if state.service.deps.budget is not None:
        state.service.deps.budget.forget_zone(owner)
    logger.info("owner %s set the time zone %s", owner, found.key)
    await say(message, t("tz_set", lang, zone=found.key, now=local_now(found)))


def tasks_page(
    tasks: list[dict[str, Any]], user: dict[str, Any] | None, settings: Any, lang: str | None
) -> tuple[str, InlineKeyboardMarkup | None]:
    """Return /tasks' text and its buttons: each active task with its next run in the
    owner's zone, and a cancel button each."""
    zone = owner_zone(user, settings)
    if not tasks:
        return t("tasks_none", lang), None
    lines = [t("tasks_title", lang, zone=zone.key)]
    for task in tasks:
        when = task["next_at"].astimezone(zone) if task["next_at"] else None
        repeat = t("task_repeat", lang, cron=task["repeat"]) if task["repeat"] else ""
        lines.append(
            t(
                "task_line",
                lang,
                id=task["id"],
                when=f"{when:%Y-%m-%d %H:%M}" if when else "-",
                repeat=repeat,
                instruction=task["instruction"][:INSTRUCTION_SHOWN],
            )
        )
        if task["missed"]:
            # Not paused: slots the chat could not receive (it blocked the bot).
            last = task["missed_last"].astimezone(zone)
            lines.append(
                t("task_missed", lang, count=task["missed"], last=f"{last:%Y-%m-%d %H:%M}")
            )
    if user is not None and user["remind_of_yourself"] == "0":
        lines.append(t("tasks_paused", lang))
    buttons = [
        [
            InlineKeyboardButton(
                t("task_cancel_button", lang, id=task["id"]),
                callback_data=f"{TASK_DATA}{task['id']}",
            )
        ]
        for task in tasks
    ]
    return "\n".join(lines), InlineKeyboardMarkup(buttons)


async def cmd_tasks(update: Update, context: Context) -> None:
    """/tasks: the owner's scheduled tasks, a cancel button each."""
    message, state = message_of(update), state_of(context)
    lang, owner = lang_of_message(message), identity_of(message).owner_id
    deps = state.service.deps
    tasks = await TaskRepository(deps.conversations.pool).active(owner)
    text, buttons = tasks_page(tasks, await deps.users.get(owner), state.settings, lang)
    await message.reply_text(text, reply_markup=buttons, do_quote=not is_private(message))


async def task_pressed(state: BotState, bot: Bot, query: CallbackQuery) -> None:
    """A press of a /tasks cancel button: cancel that task of the chat's owner (in a
    group, an administrator only) and show the list again."""
    lang = query.from_user.language_code
    identity = await pressing_owner(state, bot, query, Action.TASKS)
    if identity is None:
        await query.answer(t("group_admins_only", lang))
        return
    try:
        task_id = int((query.data or "")[len(TASK_DATA) :])
    except ValueError:
        await query.answer()
        return
    deps = state.service.deps
    repo = TaskRepository(deps.conversations.pool)
    done = await repo.cancel(identity.owner_id, task_id)
    await query.answer(t("task_cancelled" if done else "task_not_found", lang, id=task_id))
    tasks = await repo.active(identity.owner_id)
    text, buttons = tasks_page(tasks, await deps.users.get(identity.owner_id), state.settings, lang)
    try:
        await query.edit_message_text(text, reply_markup=buttons)
    except TelegramError as exc:  # "message is not modified": pressed twice
        logger.debug("could not show /tasks again: %s", exc)


TASK_COMMANDS = {
    "tz": cmd_tz,
    "tasks": cmd_tasks,
}
