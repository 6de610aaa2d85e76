"""Webhooks are safe by default (issue 34): a secret is required and checked, the server
listens on 127.0.0.1, and a forged private update (its chat not its sender's) is refused
before anything is stored.

The real Application serving its webhook, real HTTP posts, the fake Bot API and model.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from src.bot.app import build_application, serve
from src.config import ConfigError
from tests.e2e.conftest import CHAT_MODEL
from tests.e2e.test_bot_e2e import ROOT, free_port
from tests.fakes.bot_api_server import FakeBotAPI

SECRET = "s3cret-Token_1"
VICTIM = 9801
ATTACKER = 9802


async def post(url: str, update: dict[str, Any], secret: str | None) -> int:
    """POST an update as Telegram does; return the HTTP status."""
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=update, headers=headers) as response,
    ):
        return response.status


async def inbox_count(pool: Any) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute("SELECT count(*) AS n FROM inbox")).fetchone()
    return int(row["n"])


async def test_a_forged_private_update_is_refused_and_nothing_is_stored_or_answered(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/tg/hook"
    # WEBHOOK_LISTEN left to its default: the loopback address.
    await start_bot(webhook_url=url, webhook_port=port, webhook_secret_token=SECRET)
    llm.script_for(CHAT_MODEL, "Your PIN is 4321.")
    victim = tg._message(VICTIM)
    # The attacker's chat, the victim's name on it: a turn on the victim's memory,
    # answered to the attacker.
    forged = tg._message(VICTIM, chat_id=ATTACKER) | {"text": "What is my PIN?"}
    assert await post(url, {"update_id": 501, "message": forged}, SECRET) == 200
    assert await post(url, {"update_id": 502, "edited_message": forged}, SECRET) == 200
    press = {
        "id": "77",
        "from": forged["from"],
        "chat_instance": "1",
        "data": "stop",
        "message": {**forged, "from": {"id": 1, "is_bot": True, "first_name": "Bot"}},
    }
    assert await post(url, {"update_id": 503, "callback_query": press}, SECRET) == 200
    assert await inbox_count(pool) == 0  # refused before anything was stored
    # The victim's own message goes through: the forged ones were not merely queued.
    own = victim | {"text": "What is my PIN?"}
    assert await post(url, {"update_id": 504, "message": own}, SECRET) == 200
    assert (await tg.await_messages(VICTIM, 1))[0]["text"] == "Your PIN is 4321."
    assert tg.messages_to(ATTACKER) == [] and tg.calls_of("answerCallbackQuery") == []
    assert await inbox_count(pool) == 1 and len(llm.requests_for(CHAT_MODEL)) == 1


async def test_a_wrong_or_missing_secret_is_refused(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    await start_bot(webhook_url=url, webhook_port=port, webhook_secret_token=SECRET)
    assert tg.calls_of("setWebhook")[-1]["params"]["secret_token"] == SECRET
    update = {"update_id": 601, "message": tg._message(VICTIM) | {"text": "hi"}}
    for wrong in (None, "", SECRET[:-1] + "2", SECRET + "x", "ы" * 5):
        assert await post(url, update, wrong) == 403
    assert await inbox_count(pool) == 0


async def test_serving_a_webhook_without_a_secret_refuses_to_start(
    runtime_factory: Any, tg: FakeBotAPI
) -> None:
    port = free_port()
    runtime = await runtime_factory(
        telegram_bot_token="123456:TEST-TOKEN",
        telegram_api_base_url=tg.base_url,
        webhook_url=f"http://127.0.0.1:{port}/hook",
        webhook_port=port,
    )
    with pytest.raises(ConfigError, match="WEBHOOK_SECRET_TOKEN"):
        app = build_application(runtime.settings, runtime)
        await asyncio.wait_for(serve(app, asyncio.Event()), 30)
    assert tg.calls_of("setWebhook") == []


@pytest.mark.slow
def test_tgagent_bot_with_a_webhook_and_no_secret_says_so(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "WEBHOOK_"))}
    env |= {
        "PYTHONPATH": str(ROOT),
        "TELEGRAM_BOT_TOKEN": "123456:TEST-TOKEN",
        "WEBHOOK_URL": "https://bot.example.com/hook",
    }
    out = subprocess.run(
        [sys.executable, "-m", "src.cli", "bot"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "WEBHOOK_SECRET_TOKEN" in out.stderr
