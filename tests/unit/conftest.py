"""Fixtures of the bot's unit tests: the real Application with no network."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from src.bot.app import build_application
from tests.conftest import make_settings
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.offline_bot import TOKEN, OfflineRequest
from tests.fakes.openai_server import FakeOpenAI


@pytest.fixture
def factory() -> FakeBotAPI:
    """Build update payloads with the fake server's helpers (never started)."""
    return FakeBotAPI(TOKEN)


@pytest.fixture
async def bot(request: pytest.FixtureRequest, factory: FakeBotAPI) -> AsyncIterator[Any]:
    """Yield (application, offline request); indirect parametrization overrides settings."""
    overrides = getattr(request, "param", {})
    offline = OfflineRequest(factory)
    settings = make_settings(None, telegram_bot_token=TOKEN, **overrides)
    app = build_application(settings, request=offline)
    await app.initialize()
    try:
        yield app, offline
    finally:
        await app.shutdown()


@pytest.fixture
def srv(fake_llm: FakeOpenAI) -> FakeOpenAI:
    """Return the session's fake model server, reset to its defaults."""
    fake_llm.reset()
    return fake_llm


@pytest.fixture(scope="session")
def tg_server() -> Iterator[FakeBotAPI]:
    """Run one fake Bot API server for the unit tests that talk HTTP to it."""
    with FakeBotAPI(TOKEN) as server:
        yield server


@pytest.fixture
def tg(tg_server: FakeBotAPI) -> FakeBotAPI:
    """Hand out the shared fake Bot API server in a clean state."""
    tg_server.reset()
    return tg_server
