"""The real bot Application against the fake Bot API, the fake model and real PostgreSQL."""

from __future__ import annotations

import asyncio
import io
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from src.bot.app import build_application, serve
from src.bot.state import state_of
from src.services.factory import Runtime
from tests.fakes.bot_api_server import FakeBotAPI

BOT_TOKEN = "123456:TEST-TOKEN"
CHAT_MODEL = "gpt-4o-mini"
# Summaries, facts and compacts go to another model name, so that background calls never
# take a reply scripted for the chat model (`llm.script_for(CHAT_MODEL, ...)`).
SIDE_MODEL = "fake-model"
# A bot stops in well under a second; on a loaded two-core machine (CI) it may take many.
SHUTDOWN_DEADLINE = 60.0


@dataclass
class RunningBot:
    """A bot serving in the test's event loop."""

    app: Any
    runtime: Runtime
    stop: asyncio.Event
    task: asyncio.Task[None]

    async def close(self) -> None:
        """Stop the bot and wait until it has shut down; if it has not within the deadline,
        print where every task of the loop waits (what held the shutdown) and fail."""
        self.stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), SHUTDOWN_DEADLINE)
        except TimeoutError:
            stacks = io.StringIO()
            for task in asyncio.all_tasks():
                task.print_stack(file=stacks)
            sys.stderr.write(f"the bot did not stop in {SHUTDOWN_DEADLINE} s:\n{stacks.getvalue()}")
            raise


async def stored(pool: Any, owner: int) -> list[tuple[str, str]]:
    """Return (role, content) of every message in the owner's conversations, in order."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT m.role, m.content FROM messages m JOIN conversations c"
            " ON c.id = m.conversation_id WHERE c.telegram_user_id = %s ORDER BY m.id",
            (owner,),
        )
        return [(r["role"], r["content"]) for r in await cur.fetchall()]


@pytest.fixture(scope="session")
def tg_server() -> Iterator[FakeBotAPI]:
    """Run one fake Bot API server for the session."""
    with FakeBotAPI(BOT_TOKEN) as srv:
        yield srv


@pytest.fixture
def tg(tg_server: FakeBotAPI) -> FakeBotAPI:
    """Return the fake Bot API server, reset to its defaults."""
    tg_server.reset()
    return tg_server


async def until(condition: Any, timeout: float = 30.0) -> None:
    """Wait until `condition()` is true (fail the test after `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def wait_until_running(bot: RunningBot, timeout: float = 15.0) -> None:
    """Wait until the application is receiving updates (or failed to start)."""
    deadline = time.monotonic() + timeout
    while not (bot.app.running and state_of(bot.app).ready()):
        if bot.task.done():
            bot.task.result()  # raises what made it fail
            raise RuntimeError("the bot stopped during start")
        if time.monotonic() > deadline:
            raise TimeoutError("the bot did not start")
        await asyncio.sleep(0.01)


@pytest.fixture
async def start_bot(
    runtime_factory: Callable[..., Awaitable[Runtime]], tg: FakeBotAPI
) -> AsyncIterator[Callable[..., Awaitable[RunningBot]]]:
    """Start real bot Applications over the test's database; stop them afterwards."""
    running: list[RunningBot] = []

    async def start(**overrides: Any) -> RunningBot:
        values = {
            "telegram_bot_token": BOT_TOKEN,
            "telegram_api_base_url": tg.base_url,
            "summary_model": SIDE_MODEL,
            "compact_model": SIDE_MODEL,
        }
        runtime = await runtime_factory(**(values | overrides))
        app = build_application(runtime.settings, runtime)
        stop = asyncio.Event()
        bot = RunningBot(app, runtime, stop, asyncio.create_task(serve(app, stop)))
        running.append(bot)
        await wait_until_running(bot)
        return bot

    yield start
    for bot in running:
        await bot.close()
