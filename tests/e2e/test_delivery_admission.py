"""Admission once per update: a batch the database refuses is retried with the verdicts
it got the first time (issue 34, item 4)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from src.bot.app import build_application, serve
from src.services.factory import build_runtime
from src.services.texts import t
from src.storage.pg_client import make_pool
from tests.conftest import make_settings
from tests.e2e.conftest import (
    BOT_TOKEN,
    SIDE_MODEL,
    RunningBot,
    stored,
    until,
    wait_until_running,
)
from tests.fakes.bot_api_server import FakeBotAPI

ANN = 7401
STRANGER = 7402


async def inbox_away(pool: Any, away: bool) -> None:
    """Make the inbox refuse writes (its table renamed), or take them again."""
    names = ("inbox", "inbox_away") if away else ("inbox_away", "inbox")
    async with pool.connection() as conn:
        await conn.execute(f"ALTER TABLE {names[0]} RENAME TO {names[1]}")


async def test_a_batch_retried_through_an_outage_keeps_its_verdicts(
    start_bot: Any, tg: FakeBotAPI, pool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The inbox refuses a batch (three messages and /stop from an allowed user, one from
    a stranger) for a few retries: each update is admitted and charged once, so after
    the database is back all three messages are stored and answered, none is refused as
    rate limited, the stranger hears one refusal and /stop runs once."""
    await inbox_away(pool, True)
    for i in range(3):
        tg.push_text(ANN, f"message {i}")
    tg.push_text(STRANGER, "let me in")
    tg.push_text(ANN, "/stop")
    failed = "could not store"
    with caplog.at_level(logging.ERROR, logger="src.bot.receive"):
        # Room for exactly the batch's four messages of Ann's in a minute.
        await start_bot(user_rate_limit=4, allowed_user_ids=[ANN])
        refused = t("rate_limited", "ru")
        await until(
            lambda: (
                sum(failed in r.getMessage() for r in caplog.records) >= 3
                or refused in tg.texts_to(ANN)
            )
        )
    await inbox_away(pool, False)
    await tg.await_messages(ANN, 4)  # three answers and "nothing to stop"
    texts = tg.texts_to(ANN)
    assert refused not in texts
    assert texts.count(t("nothing_to_stop", "ru")) == 1
    assert tg.texts_to(STRANGER) == [t("not_allowed", "ru")]
    said = [c for role, c in await stored(pool, ANN) if role == "user"]
    assert len(said) == 3 and all(f"message {i}" in said[i] for i in range(3))


def stop_server(server: Any) -> None:
    """Stop the cluster (fast shutdown: open connections are cut)."""
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)


@pytest.mark.slow
async def test_a_batch_held_through_a_database_outage_is_stored_once_it_is_back(
    private_server: Any, tg: FakeBotAPI, llm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL is down while a batch comes (three messages of an allowed user, one of a
    stranger) and the receiver retries it: once the server is back, the three are stored
    and answered, none refused as rate limited, and the stranger heard one refusal."""
    pool = make_pool(private_server.get_uri(), 1, 10)
    pool.timeout = 3.0  # a connection is refused after 3 s, not 30: retries come sooner
    await pool.open()
    await pool.wait(timeout=10)
    settings = make_settings(
        llm,
        telegram_bot_token=BOT_TOKEN,
        telegram_api_base_url=tg.base_url,
        summary_model=SIDE_MODEL,
        compact_model=SIDE_MODEL,
        user_rate_limit=3,
        allowed_user_ids=[ANN],
    )
    runtime = await build_runtime(settings, pool=pool)
    app = build_application(settings, runtime)
    stop = asyncio.Event()
    bot = RunningBot(app, runtime, stop, asyncio.create_task(serve(app, stop)))
    try:
        await wait_until_running(bot)
        await asyncio.to_thread(stop_server, private_server)
        failed = "could not store"
        with caplog.at_level(logging.ERROR, logger="src.bot.receive"):
            for i in range(3):
                tg.push_text(ANN, f"message {i}")
            tg.push_text(STRANGER, "let me in")
            refused = t("rate_limited", "ru")
            await until(
                lambda: (
                    sum(failed in r.getMessage() for r in caplog.records) >= 3
                    or refused in tg.texts_to(ANN)
                ),
                30,
            )
        await asyncio.to_thread(private_server.ensure_postgres_running)
        assert refused not in tg.texts_to(ANN)
        await tg.await_messages(ANN, 3, timeout=60)
        assert refused not in tg.texts_to(ANN)
        assert tg.texts_to(STRANGER) == [t("not_allowed", "ru")]
        said = [c for role, c in await stored(pool, ANN) if role == "user"]
        assert len(said) == 3
    finally:
        await bot.close()
        await runtime.close()
        await pool.close()
