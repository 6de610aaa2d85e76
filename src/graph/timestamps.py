"""The time stamp in front of every stored user message: `[Текущее время: YYYY-MM-DD HH:MM] `.

One format and one pattern for everyone who writes or reads it (the service stamps,
memory and devtools strip it). The time is the owner's: in their own zone (`/tz`, or the
model's `set_timezone`) when they chose one, and then the zone's name follows the time,
so the model knows where the user is; else in TIMEZONE, without a name. The label is in
the user's language unless TIME_LABEL fixes one for everybody.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from src.graph.lang import lang_of

# The label is the user's language's (or TIME_LABEL), the time is `YYYY-MM-DD HH:MM`,
# followed by the owner's own zone when they chose one.
STAMP = re.compile(r"^\[[^\]\n]{1,60}: \d{4}-\d\d-\d\d \d\d:\d\d(?: [A-Za-z0-9_+\-/]{1,40})?\] ?")
LABELS = {"ru": "Текущее время", "en": "Current time"}


# IANA zone names by their lower-case spelling. The zone database's list is read here,
# once (about 40 ms): reading it later would block a turn's event loop for as long.
KNOWN_ZONES = {name.lower(): name for name in zoneinfo.available_timezones()}


def zone_named(name: str | None) -> ZoneInfo | None:
    """Return the IANA zone called `name`, in any letter case ("europe/berlin"), with
    spaces for underscores ("America/New York"); None for an unknown or empty name."""
    wanted = "_".join((name or "").split())
    known = KNOWN_ZONES.get(wanted.lower())
    if known is None:
        return None
    try:
        return ZoneInfo(known)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def own_zone(user: Mapping[str, Any] | None) -> ZoneInfo | None:
    """Return the zone the owner chose (the users row's `timezone`), or None."""
    return zone_named((user or {}).get("timezone"))


def owner_zone(user: Mapping[str, Any] | None, settings: Any) -> ZoneInfo:
    """Return the owner's time zone: their own, else TIMEZONE."""
    return own_zone(user) or settings.zone


def stamp(
    text: str,
    when: datetime,
    settings: Any,
    zone: ZoneInfo | None = None,
    language: str | None = None,
) -> str:
    """Prefix the user's text with its local time (seed 004): in `zone` (the owner's own,
    named after the time), else in TIMEZONE; the label in `language`'s words."""
    local = when.astimezone(zone or settings.zone)
    label = settings.time_label or LABELS[lang_of(language)]
    named = f" {zone.key}" if zone is not None else ""
    return f"[{label}: {local:%Y-%m-%d %H:%M}{named}] {text}"


def strip_stamp(text: str) -> str:
    """Return a stored user message without its time stamp."""
    return STAMP.sub("", text or "", count=1)


def turn_zone(state: Mapping[str, Any], settings: Any) -> ZoneInfo:
    """Return the zone of a turn's owner, as its state carries it (else TIMEZONE)."""
    return zone_named(state.get("zone")) or settings.zone
