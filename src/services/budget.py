"""Token budgets (USER_DAILY_TOKENS, USER_MONTHLY_TOKENS) and what calls cost (MODEL_PRICES).

Days and months are those of TIMEZONE. An owner over either budget gets no model call
until it resets: their turns are answered with one sentence, and their background work
(summaries, facts, compacts, reminders) waits. Admins (ADMIN_USER_IDS) are exempt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any

from src.config import Settings
from src.storage.usage_repo import UsageRepository

logger = logging.getLogger(__name__)


def day_start(now: datetime, settings: Settings) -> datetime:
    """Return the start of `now`'s day in TIMEZONE."""
    local = now.astimezone(settings.zone)
    return datetime.combine(local.date(), time(), tzinfo=settings.zone)


def month_start(now: datetime, settings: Settings) -> datetime:
    """Return the start of `now`'s month in TIMEZONE."""
    return day_start(now, settings).replace(day=1)


def next_day(now: datetime, settings: Settings) -> datetime:
    """Return the start of the day after `now`'s, in TIMEZONE."""
    start = day_start(now, settings)
    # Noon of the next day, then back to midnight: DST days are 23 or 25 hours long.
    return day_start(start + timedelta(hours=36), settings)


def next_month(now: datetime, settings: Settings) -> datetime:
    """Return the start of the month after `now`'s, in TIMEZONE."""
    return day_start(month_start(now, settings) + timedelta(days=32), settings).replace(day=1)


@dataclass(frozen=True)
class Spent:
    """An owner's tokens of today and this month, and when a budget they are over resets."""

    day: int
    month: int
    resets_at: datetime | None
    """None: within budget."""


class Budget:
    """Tell whether an owner may spend model calls now."""

    def __init__(
        self, repo: UsageRepository, settings: Settings, clock: Callable[[], datetime]
    ) -> None:
        self.repo = repo
        self.settings = settings
        self.clock = clock

    @property
    def limited(self) -> bool:
        """Tell whether any budget is set."""
        return bool(self.settings.user_daily_tokens or self.settings.user_monthly_tokens)

    def exempt(self, *user_ids: int | None) -> bool:
        """Tell whether any of these is an admin (ADMIN_USER_IDS): admins have no budget."""
        return any(u is not None and u in self.settings.admin_user_ids for u in user_ids)

    async def spent(self, owner_id: int) -> Spent:
        """Return what the owner spent today and this month, and any reset due."""
        now, settings = self.clock(), self.settings
        day, month = await self.repo.spent(
            owner_id, day_start(now, settings), month_start(now, settings)
        )
        resets: list[datetime] = []
        if settings.user_daily_tokens and day >= settings.user_daily_tokens:
            resets.append(next_day(now, settings))
        if settings.user_monthly_tokens and month >= settings.user_monthly_tokens:
            resets.append(next_month(now, settings))
        return Spent(day, month, max(resets) if resets else None)

    async def resets_at(self, owner_id: int, *exempt_ids: int | None) -> datetime | None:
        """Return when the owner's exhausted budget resets (local time), or None when
        they may spend: within budget, no budget set, or an admin among `exempt_ids`."""
        if not self.limited or self.exempt(owner_id, *exempt_ids):
            return None
        return (await self.spent(owner_id)).resets_at

    async def allows(self, owner_id: int) -> bool:
        """Tell whether the owner's background work may call models now."""
        return await self.resets_at(owner_id) is None


def call_cost(row: dict[str, Any], settings: Settings) -> float | None:
    """Return the estimated cost in USD of a row of sums (one model), or None when the
    model has no price in MODEL_PRICES."""
    price = settings.model_prices.get(str(row["model"]))
    if price is None:
        return None
    cached = int(row["cached_tokens"] or 0)
    fresh = max(0, int(row["input_tokens"] or 0) - cached)
    cached_price = price.input if price.cached_input is None else price.cached_input
    tokens = fresh * price.input + cached * cached_price + int(row["output_tokens"]) * price.output
    minutes = float(row.get("audio_seconds") or 0) / 60
    return tokens / 1_000_000 + minutes * price.audio_minute


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
