"""Smaller parts of the bot: /memory rendering, chat order, jobs."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from src.bot.app import build_application
from src.bot.jobs import compaction_interval_minutes, schedule_jobs
from src.bot.memory_view import render_memory
from src.bot.state import ChatOrder, state_of
from src.services.texts import t
from tests.conftest import make_settings
from tests.fakes.offline_bot import TOKEN, OfflineRequest


def test_memory_report_lists_every_layer() -> None:
    report = {
        "window": 30,
        "stored_messages": 42,
        "summary": "Talked about tea.",
        "facts": [
            {"key": "name", "value": "Ann", "type": "fact"},
            {"key": "drink", "value": "green tea", "type": "preference"},
        ],
        "compacts": [
            {
                "created_at": datetime(2026, 1, 2, tzinfo=UTC),
                "summary": "Planned a trip.",
                "topics": ["travel", "Rome"],
            }
        ],
        "reminders": True,
    }
    text = render_memory(report, "en")
    assert text.startswith(t("memory_title", "en"))
    assert t("memory_window", "en", shown=30, window=30, stored=42) in text
    few = render_memory({**report, "stored_messages": 4}, "en")
    assert "Messages in working memory: 4 of 30 (stored in this conversation: 4)." in few
    assert "Talked about tea." in text
    assert "1. name: Ann\n2. drink: green tea (preference)" in text
    assert "3. 2026-01-02 Planned a trip. [travel, Rome]" in text
    assert t("memory_reminders_on", "en") in text and text.endswith(t("memory_hint", "en"))


def test_empty_memory_report() -> None:
    text = render_memory({"window": 0, "stored_messages": 0, "reminders": False}, "ru")
    for key in ("memory_no_summary", "memory_no_facts", "memory_no_compacts"):
        assert t(key, "ru") in text
    assert t("memory_reminders_off", "ru") in text


async def test_chat_order_serializes_one_chat_and_forgets_idle_chats() -> None:
    order, log = ChatOrder(), []

    async def turn(chat: int, name: str, pause: float) -> None:
        async with order.hold(chat):
            log.append(f"{name} start")
            await asyncio.sleep(pause)
            log.append(f"{name} end")

    await asyncio.gather(turn(1, "a", 0.05), turn(1, "b", 0), turn(2, "c", 0))
    assert log.index("a end") < log.index("b start")
    assert log.index("c end") < log.index("a end")  # another chat did not wait
    assert len(order) == 0


def test_compaction_interval() -> None:
    assert compaction_interval_minutes(180) == 10
    assert compaction_interval_minutes(30) == 5
    assert compaction_interval_minutes(2) == 1


def test_jobs_are_scheduled_from_the_settings_alone() -> None:
    app = build_application(make_settings(None, telegram_bot_token=TOKEN), request=OfflineRequest())
    state = state_of(app)
    assert state.runtime is None  # nothing probes the service to decide what to schedule
    assert schedule_jobs(app, state) == [
        "reminders",
        "compaction",
        "embeddings",
        "prune-checkpoints",
    ]
