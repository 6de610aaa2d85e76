"""The terminal chat's /memory (issue 35): its dates are the owner's, as the bot's are."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from src.cli.chat import format_memory

LATE_EVENING_UTC = datetime(2026, 11, 27, 22, 30, tzinfo=UTC)  # 01:30 next day in Moscow


def report(zone: str) -> dict[str, object]:
    return {
        "window": 30,
        "stored_messages": 4,
        "summary": "",
        "reminders": True,
        "zone": ZoneInfo(zone),
        "facts": [
            {
                "key": "city",
                "value": "Paris",
                "type": "fact",
                "importance": 5,
                "previous_value": "Berlin",
                "previous_until": LATE_EVENING_UTC,
            }
        ],
        "compacts": [{"created_at": LATE_EVENING_UTC, "summary": "Planned a trip."}],
    }


def test_dates_are_in_the_owners_zone() -> None:
    moscow = format_memory(report("Europe/Moscow"), "en")
    assert "was Berlin until 2026-11-28" in moscow
    assert "previous conversation 2026-11-28: Planned a trip." in moscow
    new_york = format_memory(report("America/New_York"), "en")
    assert "was Berlin until 2026-11-27" in new_york
    assert "previous conversation 2026-11-27: Planned a trip." in new_york


def test_the_window_says_how_many_messages_it_holds() -> None:
    """4 messages stored, a window of 30: the window holds 4 of 30, not 30."""
    text = format_memory(report("Europe/Moscow"), "en")
    assert text.splitlines()[0] == "window: 4 of 30 messages, stored: 4"
