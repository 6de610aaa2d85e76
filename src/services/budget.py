"""Budgets in tokens and in dollars (USER_DAILY_TOKENS ... USER_MONTHLY_USD), and sums.

Days and months are the person's (or group's) own, in the zone they chose (/tz), else in
TIMEZONE; a change of zone reaches the budget within ZONE_TTL seconds. A person or group
over any budget gets no model call until it resets: their turns are answered with one
sentence, a turn that runs out half-way stops before its next call (BudgetGuard), and
their background work (summaries, facts, compacts, reminders) waits. A group turn counts
against the group's budgets and against the sender's own. Dollars are estimated with
MODEL_PRICES (src/services/prices.py), transcribed minutes included. Admins
(ADMIN_USER_IDS) are exempt.
"""

from __future__ import annotations

import logging
import time as clock_time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from src.config import Settings
from src.graph.model_calls import OverBudget
from src.graph.timestamps import zone_named
from src.services.prices import call_cost
from src.services.texts import t
from src.storage.usage_repo import CallRecord, UsageRepository

logger = logging.getLogger(__name__)

ZONE_TTL = 60.0
"""Seconds a person's time zone is kept before it is read again (budget days are theirs)."""


def day_start(now: datetime, settings: Settings, zone: ZoneInfo | None = None) -> datetime:
    """Return the start of `now`'s day in `zone` (None: TIMEZONE)."""
    zone = zone or settings.zone
    return datetime.combine(now.astimezone(zone).date(), time(), tzinfo=zone)


def month_start(now: datetime, settings: Settings, zone: ZoneInfo | None = None) -> datetime:
    """Return the start of `now`'s month in `zone` (None: TIMEZONE)."""
    return day_start(now, settings, zone).replace(day=1)


def next_day(now: datetime, settings: Settings, zone: ZoneInfo | None = None) -> datetime:
    """Return the start of the day after `now`'s, in `zone` (else TIMEZONE)."""
    start = day_start(now, settings, zone)
    # Noon of the next day, then back to midnight: DST days are 23 or 25 hours long.
    return day_start(start + timedelta(hours=36), settings, zone)


def next_month(now: datetime, settings: Settings, zone: ZoneInfo | None = None) -> datetime:
    """Return the start of the month after `now`'s, in `zone` (else TIMEZONE)."""
    first = month_start(now, settings, zone) + timedelta(days=32)
    return day_start(first, settings, zone).replace(day=1)


BUDGETS = ("day_tokens", "month_tokens", "day_usd", "month_usd")
"""Each budget: its period (day or month) and its unit (tokens, or US dollars)."""


@dataclass
class Spend:
    """Tokens (input + output) and their estimated cost in USD."""

    tokens: int = 0
    usd: float = 0.0

    def add(self, row: dict[str, Any], settings: Settings) -> None:
        """Add a row of sums of one model (a model without a price costs nothing)."""
        self.tokens += int(row["input_tokens"] or 0) + int(row["output_tokens"] or 0)
        self.usd += call_cost(row, settings) or 0.0


@dataclass(frozen=True)
class Spent:
    """A person's (or group's) spend of today and of this month, in their zone."""

    day: Spend
    month: Spend
    zone: ZoneInfo | None = None
    """The zone whose day and month these are (None: TIMEZONE)."""

    def of(self, budget: str) -> float:
        """Return what counts against `budget` (one of BUDGETS)."""
        period, unit = budget.split("_")
        spend = self.day if period == "day" else self.month
        return spend.tokens if unit == "tokens" else spend.usd


@dataclass(frozen=True)
class BudgetWarning:
    """A budget of a person's (or group's) that is nearly spent."""

    person_id: int
    budget: str
    share: float
    resets_at: datetime

    def text(self, owner_id: int, lang: str | None, zone: ZoneInfo) -> str:
        """Return the warning for the chat of `owner_id` (a group's sender's is theirs),
        its time in `zone` (the chat's)."""
        local = self.resets_at.astimezone(zone)
        return t(
            "budget_warning_chat" if self.person_id == owner_id else "budget_warning_sender",
            lang,
            percent=int(self.share * 100),
            budget=t(f"budget_{self.budget}", lang),
            when=f"{local:%Y-%m-%d %H:%M}",
        )


def _sums(row: dict[str, Any], period: str) -> dict[str, Any]:
    """Return one period's columns of a SPENT row as a row of sums."""
    return {
        "model": row["model"],
        "input_tokens": row[f"{period}_input"],
        "cached_tokens": row[f"{period}_cached"],
        "output_tokens": row[f"{period}_output"],
        "audio_seconds": row[f"{period}_audio"],
    }


class Budget:
    """Tell whether a person or group may spend model calls now."""

    def __init__(
        self,
        repo: UsageRepository,
        settings: Settings,
        clock: Callable[[], datetime],
        unwritten: Callable[[int], list[CallRecord]] | None = None,
    ) -> None:
        self.repo = repo
        self.settings = settings
        self.clock = clock
        self.unwritten = unwritten or (lambda person_id: [])
        """The person's calls recorded but not stored yet (a turn's, until its reply)."""
        self._zones: dict[int, tuple[float, ZoneInfo | None]] = {}

    async def zone(self, person_id: int) -> ZoneInfo | None:
        """Return the zone the person (or group) chose (/tz), None for TIMEZONE: read
        again after ZONE_TTL seconds."""
        kept = self._zones.get(person_id)
        now = clock_time.monotonic()
        if kept is not None and now - kept[0] < ZONE_TTL:
            return kept[1]
        if len(self._zones) > 10_000:  # many people seen once: start again
            self._zones.clear()
        found = zone_named(await self.repo.zone_of(person_id))
        self._zones[person_id] = (now, found)
        return found

    def forget_zone(self, person_id: int) -> None:
        """Read the person's zone again at the next check (they changed it here)."""
        self._zones.pop(person_id, None)

    def limits(self) -> dict[str, float]:
        """Return the budgets set (USER_DAILY_TOKENS ... USER_MONTHLY_USD), by BUDGETS' key."""
        s = self.settings
        limits = zip(
            BUDGETS,
            (s.user_daily_tokens, s.user_monthly_tokens, s.user_daily_usd, s.user_monthly_usd),
            strict=True,
        )
        return {key: float(limit) for key, limit in limits if limit}

    @property
    def limited(self) -> bool:
        """Tell whether any budget is set."""
        return bool(self.limits())

    def exempt(self, *user_ids: int | None) -> bool:
        """Tell whether any of these is an admin (ADMIN_USER_IDS): admins have no budget."""
        return any(u is not None and u in self.settings.admin_user_ids for u in user_ids)

    async def spent(self, person_id: int) -> Spent:
        """Return what the person (or group) spent today and this month: the calls of
        their chats, those of group turns they started, and those not stored yet."""
        now, settings = self.clock(), self.settings
        zone = await self.zone(person_id)
        day, month = Spend(), Spend()
        for row in await self.repo.spent(
            person_id, day_start(now, settings, zone), month_start(now, settings, zone)
        ):
            day.add(_sums(row, "day"), settings)
            month.add(_sums(row, "month"), settings)
        for record in self.unwritten(person_id):
            day.add(asdict(record), settings)
            month.add(asdict(record), settings)
        return Spent(day, month, zone)

    def resets(self, budget: str, zone: ZoneInfo | None = None) -> datetime:
        """Return when `budget` starts anew in `zone` (the person's; None: TIMEZONE)."""
        now = self.clock()
        if budget.startswith("day"):
            return next_day(now, self.settings, zone)
        return next_month(now, self.settings, zone)

    async def resets_at(self, owner_id: int, sender_id: int | None = None) -> datetime | None:
        """Return when the exhausted budget of the owner or of the group turn's sender
        resets (local time), or None when they may spend: within budget, no budget set,
        or an admin among them."""
        limits = self.limits()
        if not limits or self.exempt(owner_id, sender_id):
            return None
        resets: list[datetime] = []
        for person in _people(owner_id, sender_id):
            spent = await self.spent(person)
            over = [key for key, limit in limits.items() if spent.of(key) >= limit]
            resets += [self.resets(key, spent.zone) for key in over]
        return max(resets) if resets else None

    async def refusal(self, owner_id: int, sender_id: int | None, lang: str | None) -> str | None:
        """Return the sentence for an owner (or a group turn's sender) over a budget,
        saying when it resets in the owner's zone; None when they may call models."""
        resets = await self.resets_at(owner_id, sender_id)
        if resets is None:
            return None
        local = resets.astimezone(await self.zone(owner_id) or self.settings.zone)
        logger.info("user %s is over the token budget until %s", owner_id, local)
        return t("over_budget", lang, when=f"{local:%Y-%m-%d %H:%M}")

    async def allows(self, owner_id: int) -> bool:
        """Tell whether the owner's background work may call models now."""
        return await self.resets_at(owner_id) is None

    async def warnings(self, owner_id: int, sender_id: int | None = None) -> list[BudgetWarning]:
        """Return the budgets of the owner and sender that are BUDGET_WARN_AT spent and
        not used up, each once a period: asking again returns them no more."""
        limits, share = self.limits(), self.settings.budget_warn_at
        if not limits or not share or self.exempt(owner_id, sender_id):
            return []
        now, found = self.clock(), []
        for person in _people(owner_id, sender_id):
            spent = await self.spent(person)
            for key, limit in limits.items():
                used = spent.of(key) / limit
                if not share <= used < 1:
                    continue
                start = day_start if key.startswith("day") else month_start
                period = start(now, self.settings, spent.zone)
                if await self.repo.warn_once(person, key, period):
                    found.append(BudgetWarning(person, key, used, self.resets(key, spent.zone)))
        return found

    async def warning_texts(
        self, owner_id: int, sender_id: int | None, lang: str | None
    ) -> list[str]:
        """Return a sentence per budget `warnings` finds, its times in the owner's zone."""
        found = await self.warnings(owner_id, sender_id)
        if not found:
            return []
        zone = await self.zone(owner_id) or self.settings.zone
        return [warning.text(owner_id, lang, zone) for warning in found]


def _people(owner_id: int, sender_id: int | None) -> list[int]:
    """Return whose budgets a call counts against: the owner's, and a group's sender's."""
    return [owner_id] if sender_id in (None, owner_id) else [owner_id, int(sender_id)]


class BudgetGuard:
    """Refuse a turn's model call when the owner or sender is over budget: checked before
    every call (a turn of tool rounds and memory work makes many), not only the first.

    The usage recorder asks it first thing in its start callback (see UsageRecorder):
    LangChain awaits the handlers' starts one by one, so a raising handler would leave
    every later handler's start created and never awaited.
    """

    def __init__(self, budget: Budget) -> None:
        self.budget = budget

    async def check(self, metadata: dict[str, Any] | None) -> None:
        """Raise OverBudget when the call's turn may spend no more."""
        meta = metadata or {}
        owner = meta.get("owner_id")
        if not meta.get("turn_id") or owner is None or not self.budget.limited:
            return  # work outside a turn asks `allows` before it starts
        sender = meta.get("sender_id")
        resets = await self.budget.resets_at(int(owner), int(sender) if sender else None)
        if resets is not None:
            logger.info("a model call of %s stopped: over budget until %s", owner, resets)
            raise OverBudget(resets)


@dataclass
class Totals:
    """Sums over calls of several models, with their cost."""

    calls: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    audio_seconds: float = 0.0
    estimated: int = 0
    errors: int = 0
    cost: float = 0.0
    unpriced: list[str] | None = None
    """Models used that have no price: the cost leaves them out."""

    @property
    def tokens(self) -> int:
        """Input and output tokens: what budgets count."""
        return self.input_tokens + self.output_tokens

    @classmethod
    def of(cls, rows: Iterable[dict[str, Any]], settings: Settings) -> Totals:
        """Add up rows of sums (one per model)."""
        totals = cls(unpriced=[])
        for row in rows:
            totals.calls += int(row["calls"])
            totals.input_tokens += int(row["input_tokens"] or 0)
            totals.cached_tokens += int(row["cached_tokens"] or 0)
            totals.output_tokens += int(row["output_tokens"] or 0)
            totals.audio_seconds += float(row["audio_seconds"] or 0)
            totals.estimated += int(row["estimated"])
            totals.errors += int(row["errors"])
            cost = call_cost(row, settings)
            if cost is None:
                assert totals.unpriced is not None
                totals.unpriced.append(str(row["model"]))
            else:
                totals.cost += cost
        return totals

    def as_json(self) -> dict[str, Any]:
        """Return the totals as plain JSON values."""
        return {
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "cached_tokens": self.cached_tokens,
            "output_tokens": self.output_tokens,
            "audio_seconds": round(self.audio_seconds, 1),
            "estimated_calls": self.estimated,
            "errors": self.errors,
            "cost_usd": round(self.cost, 6),
            "unpriced_models": sorted(set(self.unpriced or [])),
        }
