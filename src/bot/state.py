"""What the bot's handlers and jobs share, kept in the application's `bot_data`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from src.bot.access import AccessPolicy, GroupAdmins, RateLimiter
from src.bot.live import LiveTurns
from src.config import Settings
from src.services.agent_service import AgentService, Identity
from src.services.factory import Runtime
from src.services.group_moves import move_group
from src.services.keyed_lock import KeyedLock
from src.services.media import MediaReader
from src.services.reachability import chat_unreachable
from src.services.reminders import ReminderService

if TYPE_CHECKING:
    from src.bot.outbox import Outbox
    from src.bot.queue import UpdateWorker
    from src.bot.receive import Receiver
    from src.bot.stops import StopChannel

logger = logging.getLogger(__name__)

BOT_DATA_KEY = "tgagent"


class ChatOrder(KeyedLock):
    """Handle one chat's messages in the order they arrived, other chats concurrently.

    Updates run concurrently; a message's handler takes its chat's lock before its first
    await, so locks are granted in arrival order and a quick second message cannot
    overtake the first one's turn or its reply.
    """


@dataclass
class BotState:
    """Settings, access rules, and the runtime once `post_init` has built it."""

    settings: Settings
    access: AccessPolicy
    limiter: RateLimiter
    runtime: Runtime | None = None
    owns_runtime: bool = False
    reminders: ReminderService | None = None
    order: ChatOrder = field(default_factory=ChatOrder)
    group_admins: GroupAdmins = field(default_factory=GroupAdmins)
    sender: Outbox | None = None
    receiver: Receiver | None = None
    worker: UpdateWorker | None = None
    live: LiveTurns = field(default_factory=LiveTurns)
    stops: StopChannel | None = None
    reader: MediaReader | None = None

    @classmethod
    def from_settings(cls, settings: Settings, runtime: Runtime | None = None) -> BotState:
        """Build the state the settings describe."""
        return cls(
            settings=settings,
            access=AccessPolicy.of(settings.allowed_user_ids, settings.admin_user_ids),
            limiter=RateLimiter(settings.user_rate_limit),
            runtime=runtime,
        )

    @property
    def service(self) -> AgentService:
        """Return the agent service; the runtime must be started."""
        if self.runtime is None:
            raise RuntimeError("the bot's runtime is not started (post_init has not run)")
        return self.runtime.service

    @property
    def outbox(self) -> Outbox:
        """Return the outbox; the runtime must be started."""
        if self.sender is None:
            raise RuntimeError("the bot's runtime is not started (post_init has not run)")
        return self.sender

    @property
    def media(self) -> MediaReader:
        """Return the reader of voice notes, photos and documents (made on first use)."""
        if self.reader is None:
            self.reader = MediaReader(self.service.deps, self.service.usage)
        return self.reader

    async def chat_unreachable(self, chat_id: int, reason: str) -> None:
        """A chat refuses the bot's messages (403): nothing goes to it until it writes
        again (src/services/reachability.py); its /mute is left alone."""
        await chat_unreachable(self.service.deps.users, chat_id, reason)

    async def chat_migrated(self, old: int, new: int) -> None:
        """A group became a supergroup with a new chat id: its memory, budget, model and
        pending replies go with it, and what its running turn writes too (see
        src/services/group_moves.py)."""
        moved = await move_group(self.service, old, new)
        if moved:
            logger.info("group %s is now supergroup %s: moved %s", old, new, moved)
        if old in self.access.allowed and not self.access.allows(0, new):
            logger.warning("group %s is now %s: add the new id to ALLOWED_USER_IDS", old, new)

    async def topic_gone(self, chat_id: int, topic: int) -> None:
        """Telegram no longer has a topic (deleted: it sends no event for that): its
        session ends now (facts, compact), as a closed topic's does. A failure is logged:
        the idle job compacts it later."""
        try:
            # The chat's memory owner: the group, or the private chat's user (its id).
            ended = await self.service.end_topic_session(Identity(chat_id, topic_id=topic))
            logger.info("topic %s of chat %s is gone: %d sessions ended", topic, chat_id, ended)
        except Exception:
            logger.warning(
                "ending the session of gone topic %s of %s failed", topic, chat_id, exc_info=True
            )

    def ready(self) -> bool:
        """Tell whether what this process runs (receiving, working) has started."""
        parts = [p for p in (self.receiver, self.worker) if p is not None]
        if self.receiver is not None and not self.receiver.receiving.is_set():
            return False
        if self.worker is not None and not self.worker.running.is_set():
            return False
        if self.stops is not None and not self.stops.listening.is_set():
            return False
        return bool(parts)


def state_of(holder: Any) -> BotState:
    """Return the bot state of an Application or a handler's CallbackContext."""
    state = holder.bot_data[BOT_DATA_KEY]
    assert isinstance(state, BotState)
    return state
