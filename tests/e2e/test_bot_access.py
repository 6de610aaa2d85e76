"""Who may do what, through the real Application against the fake Bot API and real Postgres."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.fakes.bot_api_server import FakeBotAPI

OPEN_WARNING = "the bot is open to everyone"


async def test_an_open_bot_says_so_once_at_start(
    start_bot: Any, tg: FakeBotAPI, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="src.bot.app"):
        await start_bot()
    assert [r.getMessage() for r in caplog.records].count(
        "the bot is open to everyone: set ALLOWED_USER_IDS or ADMIN_USER_IDS to close it"
    ) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="src.bot.app"):
        await start_bot(admin_user_ids=[1])
        await start_bot(allowed_user_ids=[2])
    assert not [r for r in caplog.records if OPEN_WARNING in r.getMessage()]
