"""Who may talk to the bot, and how often: the allowlist, a per-user rate limit, and
who administers a group (for the commands that change a group's memory)."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from telegram import Bot
from telegram.constants import ChatMemberStatus
from telegram.error import BadRequest

logger = logging.getLogger(__name__)

# A group's administrators, as getChatMember tells them.
ADMIN_STATUSES = frozenset({ChatMemberStatus.OWNER, ChatMemberStatus.ADMINISTRATOR})


@dataclass(frozen=True)
class AccessPolicy:
    """ALLOWED_USER_IDS plus ADMIN_USER_IDS, who are always allowed; both empty = everyone.

    Either list closes the bot to everyone it does not name. A group chat's id in the
    allowlist admits everyone who writes in that group.
    """

    allowed: frozenset[int] = field(default_factory=frozenset)
    admins: frozenset[int] = field(default_factory=frozenset)

    @classmethod
    def of(cls, allowed: Iterable[int], admins: Iterable[int]) -> AccessPolicy:
        """Build a policy from the settings' id lists."""
        return cls(frozenset(allowed), frozenset(admins))

    @property
    def open(self) -> bool:
        """Tell whether everyone may use the bot."""
        return not self.allowed and not self.admins

    def is_admin(self, user_id: int) -> bool:
        """Tell whether the user is an administrator of the bot."""
        return user_id in self.admins

    def allows(self, user_id: int, chat_id: int | None = None) -> bool:
        """Tell whether this user, writing in this chat, may use the bot."""
        if self.open or user_id in self.allowed or user_id in self.admins:
            return True
        return chat_id is not None and chat_id < 0 and chat_id in self.allowed

    def admits_owner(self, owner_id: int) -> bool:
        """Tell whether background jobs may serve this memory owner (a user, or a group).

        A group's members are not known without asking Telegram: a group is served when
        the bot is open or the group itself is listed.
        """
        if owner_id < 0:
            return self.open or owner_id in self.allowed
        return self.allows(owner_id)

    def admits_task(self, owner_id: int, requested_by: int | None) -> bool:
        """Tell whether a scheduled task may run: its owner is served, or, in a group, the
        member who asked for it may still use the bot there (as their messages may)."""
        if self.admits_owner(owner_id):
            return True
        return owner_id < 0 and requested_by is not None and self.allows(requested_by, owner_id)


class RateLimiter:
    """At most `limit` messages per user in any `period` seconds (0 = no limit).

    A sliding window of timestamps per user; users fall out of the table once their
    window is empty, so memory follows the active users, not everyone ever seen.
    """

    def __init__(
        self,
        limit: int,
        period: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.period = period
        self.clock = clock
        self._hits: dict[int, deque[float]] = {}
        self._told: dict[int, float] = {}

    def _prune(self, now: float) -> None:
        """Drop users whose whole window has passed."""
        horizon = now - self.period
        for user_id in [u for u, hits in self._hits.items() if hits[-1] <= horizon]:
            del self._hits[user_id]
        for user_id in [u for u, until in self._told.items() if until <= now]:
            del self._told[user_id]

    def allow(self, user_id: int) -> bool:
        """Count one message of the user; tell whether it is within the limit."""
        if self.limit <= 0:
            return True
        now = self.clock()
        if len(self._hits) > 1024:
            self._prune(now)
        hits = self._hits.setdefault(user_id, deque())
        while hits and hits[0] <= now - self.period:
            hits.popleft()
        if len(hits) >= self.limit:
            return False
        hits.append(now)
        return True

    def should_notify(self, user_id: int) -> bool:
        """Tell whether to explain the limit now: once per window, not on every message."""
        now = self.clock()
        if self._told.get(user_id, 0.0) > now:
            return False
        self._told[user_id] = now + self.period
        return True

    def __len__(self) -> int:
        """Return how many users are tracked."""
        return len(self._hits)


class GroupAdmins:
    """Tell who administers a group, asking Telegram (getChatMember) at most once a `ttl`.

    Promotions and demotions reach the bot within a minute, and a burst of commands costs
    one request per user and group.
    """

    def __init__(self, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._known: dict[tuple[int, int], tuple[bool, float]] = {}

    async def is_admin(self, bot: Bot, chat_id: int, user_id: int) -> bool:
        """Tell whether the user is the group's creator or one of its administrators."""
        now, key = self.clock(), (chat_id, user_id)
        known = self._known.get(key)
        if known is not None and known[1] > now:
            return known[0]
        try:
            member = await bot.get_chat_member(chat_id, user_id)
            admin = member.status in ADMIN_STATUSES
        except BadRequest as exc:  # "chat not found", "user not found": not an admin
            logger.info("getChatMember(%s, %s): %s", chat_id, user_id, exc.message)
            admin = False
        if len(self._known) > 1024:
            self._known = {k: v for k, v in self._known.items() if v[1] > now}
        self._known[key] = (admin, now + self.ttl)
        return admin

    def __len__(self) -> int:
        """Return how many answers are kept."""
        return len(self._known)
