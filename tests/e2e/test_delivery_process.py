"""The inbox and outbox across processes: `tgagent bot` and `tgagent worker` killed with
SIGKILL in the middle of a load, and a webhook receiver killed right after its 200.

Every test counts exactly: each message answered once, none twice, in its chat's order,
and each user message stored once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.conftest import stored as rows_of
from tests.e2e.test_reliability_process import (
    bot_env,
    bot_process,
    echo,
    inbox,
    output,
    start_process,
    terminate,
    unstamped,
    wait_for_inbox,
    worker_process,
)
from tests.fakes.bot_api_server import FakeBotAPI

logger = logging.getLogger(__name__)

pytestmark = [pytest.mark.server, pytest.mark.slow]

SECRET = "hook-secret-0123456789"


async def user_texts(pool: Any, owner: int) -> list[str]:
    """Return the owner's stored user messages, without their time stamps, in order."""
    return [unstamped(content) for role, content in await rows_of(pool, owner) if role == "user"]


async def await_total(tg: FakeBotAPI, chats: list[int], n: int, timeout: float) -> None:
    """Wait until `n` messages in all went to `chats`."""
    deadline = time.monotonic() + timeout
    while (total := sum(len(tg.messages_to(c)) for c in chats)) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{total}/{n} messages answered")
        await asyncio.sleep(0.05)


async def test_sigkill_with_twenty_messages_queued_answers_all_once_in_order(
    pool: Any, fresh_schema: str, tg: FakeBotAPI, llm: Any, tmp_path: Path, record_property: Any
) -> None:
    """The only `tgagent bot` dies while 20 messages of one chat wait behind a slow model:
    the restarted process answers all 20, once each, in the order they were sent."""
    user = 8501
    env = bot_env(fresh_schema, tg, llm, USER_RATE_LIMIT="0")
    said = [f"сообщение {i:02d}" for i in range(20)]
    llm.default_reply = echo
    llm.delay = 30.0
    async with bot_process(env, tg, tmp_path) as proc:
        for text in said:
            tg.push_text(user, text)
        await wait_for_inbox(pool, len(said))
        while llm.in_flight < 1:  # the first turn waits for the model
            await asyncio.sleep(0.02)
        proc.kill()
        await asyncio.to_thread(proc.wait, 10)
    assert await inbox(pool) == (20, 0)
    assert tg.texts_to(user) == []
    assert await user_texts(pool, user) == said[:1]  # only the turn that began

    llm.delay = 0.0
    async with bot_process(env, tg, tmp_path) as proc:
        began = time.monotonic()
        await tg.await_messages(user, len(said), timeout=60)
        answered_in = time.monotonic() - began
        await asyncio.sleep(1.0)  # time enough for a duplicate to show
        exit_s = await terminate(proc)
    assert proc.returncode == 0, output(tmp_path)[1]
    assert tg.texts_to(user) == [f"re: {text}" for text in said]
    assert await user_texts(pool, user) == said  # the first one not stored twice
    assert [role for role, _ in await rows_of(pool, user)] == ["user", "assistant"] * 20
    assert await inbox(pool) == (20, 20)
    figures = {
        "queued_at_kill": 20,
        "answered": len(tg.texts_to(user)),
        "duplicates": 0,
        "answered_after_restart_s": round(answered_in, 2),
        "exit_s": round(exit_s, 2),
    }
    for key, value in figures.items():
        record_property(key, value)
    logger.warning("SIGKILL with 20 queued: %s", figures)


async def quiet(tg: FakeBotAPI, chats: list[int], seconds: float) -> None:
    """Wait until no message went to `chats` for `seconds`."""
    count, since = -1, time.monotonic()
    while time.monotonic() - since < seconds:
        now = sum(len(tg.messages_to(c)) for c in chats)
        if now != count:
            count, since = now, time.monotonic()
        await asyncio.sleep(0.02)


@pytest.mark.slow
async def test_a_worker_killed_under_load_loses_and_repeats_nothing(
    pool: Any, fresh_schema: str, tg: FakeBotAPI, llm: Any, tmp_path: Path, record_property: Any
) -> None:
    """`tgagent bot` and two `tgagent worker`s share 50 chats x 10 messages; one worker is
    SIGKILLed mid-load: all 500 answered, none twice, each chat's in order."""
    chats = [8600 + i for i in range(50)]
    rounds = 10
    env = bot_env(fresh_schema, tg, llm, USER_RATE_LIMIT="0", WORKER_CONCURRENCY="3")
    llm.default_reply = echo
    llm.delay = 0.05
    total = len(chats) * rounds
    began = time.monotonic()
    async with (
        bot_process(env, tg, tmp_path, name="bot-") as bot,
        worker_process(env, tmp_path, name="worker1-") as victim,
        worker_process(env, tmp_path, name="worker2-") as survivor,
    ):
        for i in range(rounds):
            for chat in chats:
                tg.push_text(chat, f"{chat}-{i}")
        await await_total(tg, chats, total // 4, timeout=240)
        # Killed while its turns wait for the model, not between Telegram accepting a
        # reply and the outbox recording it: that window (milliseconds) is the one place
        # a reply can go twice, as after a sendMessage timeout; no API call closes it.
        llm.delay = 2.0
        await quiet(tg, chats, 0.5)
        victim.kill()
        llm.delay = 0.05
        await asyncio.to_thread(victim.wait, 10)
        killed_at = sum(len(tg.messages_to(c)) for c in chats)
        await await_total(tg, chats, total, timeout=240)
        elapsed = time.monotonic() - began
        await asyncio.sleep(1.0)  # time enough for a duplicate to show
        for proc in (survivor, bot):
            await terminate(proc)
            assert proc.returncode == 0
    answered = sum(len(tg.messages_to(c)) for c in chats)
    for chat in chats:
        expected = [f"{chat}-{i}" for i in range(rounds)]
        assert tg.texts_to(chat) == [f"re: {text}" for text in expected], chat
        assert await user_texts(pool, chat) == expected, chat
    assert answered == total
    assert await inbox(pool) == (total, total)
    workers_log = output(tmp_path, "worker2-")[1] + output(tmp_path, "bot-")[1]
    figures = {
        "messages": total,
        "answered": answered,
        "duplicates": answered - total,
        "answered_when_killed": killed_at,
        "retried_jobs": workers_log.count("of a dead worker runs again"),  # by either
        "elapsed_s": round(elapsed, 2),
    }
    for key, value in figures.items():
        record_property(key, value)
    logger.warning("worker killed under load: %s", figures)
    assert figures["retried_jobs"] >= 1  # the victim died with turns in flight


def free_port() -> int:
    """Return a TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def webhook_process(
    env: dict[str, str], tg: FakeBotAPI, cwd: Path
) -> AsyncIterator[subprocess.Popen[str]]:
    """Run `tgagent bot` with a webhook until it has set it; kill it if the test did not."""
    hooks = len(tg.calls_of("setWebhook"))
    proc = start_process("bot", env, cwd, "hook-")
    try:
        deadline = time.monotonic() + 60
        while len(tg.calls_of("setWebhook")) == hooks:  # set once its server listens
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the webhook did not start: {output(cwd, 'hook-')}")
            await asyncio.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def post(url: str, update: dict[str, Any], secret: str | None) -> int:
    """POST an update as Telegram does; return the HTTP status."""
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=update, headers=headers) as response,
    ):
        return response.status


async def test_a_webhook_receiver_killed_after_its_200_loses_nothing(
    pool: Any, fresh_schema: str, tg: FakeBotAPI, llm: Any, tmp_path: Path, record_property: Any
) -> None:
    """The webhook answers 200 once the update is stored: killed right after it (before
    the model answered), the restarted process answers the update exactly once. A POST
    without the secret token gets 403 and is not stored."""
    user = 8701
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    hook = {
        "WEBHOOK_URL": url,
        "WEBHOOK_LISTEN": "127.0.0.1",
        "WEBHOOK_PORT": str(port),
        "WEBHOOK_SECRET_TOKEN": SECRET,
    }
    env = bot_env(fresh_schema, tg, llm, **hook)
    update = {"update_id": 70001, "message": tg._message(user) | {"text": "не потеряй меня"}}
    llm.default_reply = echo
    llm.delay = 30.0
    async with webhook_process(env, tg, tmp_path) as proc:
        assert tg.webhook_url == url
        assert await post(url, update, None) == 403
        assert await post(url, update, "wrong-secret") == 403
        assert await inbox(pool) == (0, 0)  # refused before anything was stored
        assert await post(url, update, SECRET) == 200
        proc.kill()  # at once: the turn has not answered (the model takes 30 s)
        await asyncio.to_thread(proc.wait, 10)
    assert await inbox(pool) == (1, 0)
    assert tg.texts_to(user) == []

    llm.delay = 0.0
    async with webhook_process(env, tg, tmp_path) as proc:
        began = time.monotonic()
        await tg.await_messages(user, 1, timeout=30)
        answered_in = time.monotonic() - began
        # Telegram sending the update again (a 200 it never saw) changes nothing.
        assert await post(url, update, SECRET) == 200
        await asyncio.sleep(1.5)  # time enough for a duplicate to show
        exit_s = await terminate(proc)
    assert proc.returncode == 0, output(tmp_path, "hook-")[1]
    assert tg.texts_to(user) == ["re: не потеряй меня"]
    assert await user_texts(pool, user) == ["не потеряй меня"]
    assert await inbox(pool) == (1, 1)

    # Back to polling: the webhook is deleted, and nothing comes twice.
    async with bot_process(bot_env(fresh_schema, tg, llm), tg, tmp_path) as proc:
        assert tg.webhook_url == ""
        tg.push_text(user, "а теперь опросом")
        await tg.await_messages(user, 2, timeout=30)
        await terminate(proc)
    assert tg.texts_to(user) == ["re: не потеряй меня", "re: а теперь опросом"]
    figures = {
        "posted": 1,
        "refused_without_secret": 2,
        "answered": 1,
        "duplicates": 0,
        "answered_after_restart_s": round(answered_in, 2),
        "exit_s": round(exit_s, 2),
    }
    for key, value in figures.items():
        record_property(key, value)
    logger.warning("webhook killed after its 200: %s", figures)
