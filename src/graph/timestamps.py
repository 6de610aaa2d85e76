"""The time stamp in front of every stored user message: `[Текущее время: YYYY-MM-DD HH:MM] `.

One format and one pattern for everyone who writes or reads it (the service stamps,
memory and devtools strip it).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

# The label is configurable (TIME_LABEL), the time is always `YYYY-MM-DD HH:MM`.
STAMP = re.compile(r"^\[[^\]\n]{1,60}: \d{4}-\d\d-\d\d \d\d:\d\d\] ?")


def stamp(text: str, when: datetime, settings: Any) -> str:
    """Prefix the user's text with its local time (seed 004)."""
    local = when.astimezone(settings.zone)
    return f"[{settings.time_label}: {local:%Y-%m-%d %H:%M}] {text}"


def strip_stamp(text: str) -> str:
    """Return a stored user message without its time stamp."""
    return STAMP.sub("", text or "", count=1)
