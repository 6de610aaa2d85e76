"""/tz and /tasks: the chat owner's time zone, and their scheduled tasks with a cancel
button each (the press is handled where presses arrive, src/bot/receive.py).

Both act on the chat's memory owner: the user in a private chat, the group in a group,
where only its administrators may change them.
"""

from __future__ import annotations

import logging
from datetime import datetime

from telegram import Update

from src.bot.chats import identity_of
from src.bot.commands import Context, lang_of_message, may_change_memory, message_of, say
from src.bot.state import state_of
from src.graph.timestamps import own_zone, zone_named
from src.services.texts import t

logger = logging.getLogger(__name__)


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
        if own is None:
            zone = state.settings.zone
            await say(message, t("tz_default", lang, zone=zone.key, now=local_now(zone)))
        else:
            await say(message, t("tz_show", lang, zone=own.key, now=local_now(own)))
        return
    wanted = " ".join(context.args)
    found = zone_named(wanted)
    if found is None:
        await say(message, t("tz_unknown", lang, zone=wanted[:60]))
        return
    if not await may_change_memory(message, context):
        return
    await users.set_timezone(owner, found.key)
    logger.info("owner %s set the time zone %s", owner, found.key)
    await say(message, t("tz_set", lang, zone=found.key, now=local_now(found)))


TASK_COMMANDS = {
    "tz": cmd_tz,
}
