"""Admission once per update: a batch the database refuses is retried with the verdicts
it got the first time (issue 34, item 4)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from src.services.texts import t
from tests.e2e.conftest import stored, until
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
