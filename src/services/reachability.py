"""Chats Telegram will not deliver to (403: the user blocked the bot, the bot was removed
from the group): unreachable until they write again, which is not muted.

/mute is the user's choice and stays theirs: a 403 never turns reminders off. It marks
the chat unreachable instead (`users.unreachable_since`, sql/0035_unreachable.sql), and
nothing is sent to it meanwhile: no reminders, a one-time task's answer held for later,
a repeating task's slots counted as missed (src/bot/task_runs.py). The chat's next update
clears the mark and sends what was held (src/storage/delivery_repo.py).
"""

from __future__ import annotations

import logging

from src.storage.users_repo import UsersRepository

logger = logging.getLogger(__name__)


async def chat_unreachable(users: UsersRepository, chat_id: int, reason: object) -> bool:
    """Mark the chat unreachable after Telegram refused it a message for `reason` (its
    error's description, never a token); log it once, when it is news. Return whether
    it was."""
    news = await users.mark_unreachable(chat_id)
    if news:
        logger.info(
            "chat %s cannot be reached (%s): nothing is sent to it until it writes again",
            chat_id,
            reason,
        )
    return news
