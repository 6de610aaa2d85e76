"""Seed 000's window arithmetic and the time stamp of user messages."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from src.config import Settings
from src.graph.memory.window import window_size
from src.services.agent_service import stamp


@pytest.mark.parametrize(
    ("active", "max_context", "expected"),
    [(None, 30, 30), (0, 30, 0), (2, 30, 2), (4, 30, 4), (31, 30, 30), (None, 10, 10), (6, 10, 6)],
)
def test_window_size(active: int | None, max_context: int, expected: int) -> None:
    assert window_size(active, max_context) == expected


def test_stamp_uses_configured_zone_and_label() -> None:
    when = datetime(2024, 12, 21, 12, 30, tzinfo=UTC)
    moscow = Settings(_env_file=None)  # type: ignore[call-arg]
    assert stamp("hi", when, moscow) == "[Текущее время: 2024-12-21 15:30] hi"
    other = Settings(_env_file=None, timezone="UTC", time_label="Now")  # type: ignore[call-arg]
    assert stamp("hi", when, other) == "[Now: 2024-12-21 12:30] hi"
