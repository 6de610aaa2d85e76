"""What the bot's handlers and jobs share, kept in the application's `bot_data`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from src.bot.access import AccessPolicy, GroupAdmins, RateLimiter
from src.config import Settings
from src.services.agent_service import AgentService
from src.services.factory import Runtime
from src.services.keyed_lock import KeyedLock
from src.services.reminders import ReminderService

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


def state_of(holder: Any) -> BotState:
    """Return the bot state of an Application or a handler's CallbackContext."""
    state = holder.bot_data[BOT_DATA_KEY]
    assert isinstance(state, BotState)
    return state
