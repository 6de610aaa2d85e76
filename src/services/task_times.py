"""When a scheduled task runs: `when` (an ISO time or a phrase such as "in 5 seconds",
"завтра в 9:00") and `repeat` (a cron expression), both in the owner's time zone.

Phrases are read by dateparser (BSD-3-Clause), cron expressions by croniter (MIT, also
procrastinate's own dependency); a five-field expression is minutes to weekdays, a sixth
field counts seconds (croniter's convention).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import dateparser
from croniter import CroniterBadCronError, CroniterBadDateError, croniter

# "at 9", "в 9" without minutes: dateparser would keep the current minutes and hours.
BARE_HOUR = re.compile(r"\b(at|в|во)\s+(\d{1,2})(?![\d:.])(\s*(?:am|pm))?", re.IGNORECASE)
# How many of a cron expression's next slots are checked against the shortest interval.
GAPS_CHECKED = 50


class BadTime(ValueError):
    """A `when` or a `repeat` that cannot be used; the message says why, for the model."""


def parse_when(when: str, zone: ZoneInfo, now: datetime) -> datetime:
    """Return the moment `when` names, in the future; a time without a zone is in `zone`."""
    text = " ".join((when or "").split())
    if not text:
        raise BadTime("`when` is empty")
    found = _iso(text, zone)
    if found is None:
        text = BARE_HOUR.sub(lambda m: f"{m[1]} {m[2]}:00{m[3] or ''}", text)
        settings = {
            "TIMEZONE": zone.key,
            "TO_TIMEZONE": zone.key,
            "RETURN_AS_TIMEZONE_AWARE": True,
            "PREFER_DATES_FROM": "future",
            "RELATIVE_BASE": now.astimezone(zone).replace(tzinfo=None),
        }
        found = dateparser.parse(text, languages=["en", "ru"], settings=settings)
    if found is None:
        raise BadTime(
            f"cannot read the time {when!r}: give an ISO time (2026-12-01T09:00) or a "
            'phrase like "in 10 minutes", "tomorrow at 9:00"'
        )
    if found.tzinfo is None:
        found = found.replace(tzinfo=zone)
    if found <= now - timedelta(seconds=1):
        raise BadTime(f"{when!r} is in the past ({found.astimezone(zone):%Y-%m-%d %H:%M:%S})")
    return max(found, now)


def _iso(text: str, zone: ZoneInfo) -> datetime | None:
    """Return an ISO 8601 time (naive ones in `zone`), or None if `text` is not one."""
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        return None
    return found if found.tzinfo is not None else found.replace(tzinfo=zone)


def check_cron(expression: str, zone: ZoneInfo, now: datetime, shortest: float) -> str:
    """Return the cron expression, normalized, if it is valid and never repeats more
    often than every `shortest` seconds; else raise BadTime."""
    cron = " ".join((expression or "").split())
    if not croniter.is_valid(cron):
        raise BadTime(
            f"{expression!r} is not a cron expression (minute hour day month weekday, "
            'e.g. "0 9 * * 1" for Mondays at 9:00)'
        )
    slots = croniter(cron, now.astimezone(zone))
    previous = slots.get_next(datetime)
    for _ in range(GAPS_CHECKED):
        following = slots.get_next(datetime)
        if (following - previous).total_seconds() < shortest:
            raise BadTime(f"tasks may repeat at most once every {_span(shortest)}")
        previous = following
    return cron


def next_slot(cron: str, zone: ZoneInfo, after: datetime) -> datetime | None:
    """Return the cron expression's first slot after `after` (None: no more)."""
    try:
        found: datetime = croniter(cron, after.astimezone(zone)).get_next(datetime)
    except (CroniterBadCronError, CroniterBadDateError):
        return None
    return found


def _span(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} hour(s)"
    if seconds % 60 == 0:
        return f"{seconds / 60:g} minute(s)"
    return f"{seconds:g} second(s)"
