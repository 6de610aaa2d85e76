"""PostgreSQL restarts under a load of turns: the service recovers and loses nothing it
acknowledged. Runs on a private embedded cluster, never the machine's shared server."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from src.services.agent_service import Identity
from src.services.factory import build_runtime
from src.storage.pg_client import make_pool
from tests.conftest import make_settings

logger = logging.getLogger(__name__)


def restart(server: Any) -> None:
    """Restart the cluster (fast shutdown: open connections are cut)."""
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user)


@pytest.mark.slow
async def test_restart_during_load(private_server: Any, llm: Any) -> None:
    pool = make_pool(private_server.get_uri(), 1, 10)
    await pool.open()
    await pool.wait(timeout=10)
    rt = await build_runtime(make_settings(llm, summary_trigger=1000), pool=pool)
    llm.delay = 0.005
    results: list[tuple[int, str, Any]] = []

    async def user(uid: int) -> None:
        for i in range(15):
            text = f"user {uid} message {i}"
            results.append((uid, text, await rt.service.handle_message(Identity(uid), text)))
            await asyncio.sleep(0.05)

    async def restarter() -> float:
        await asyncio.sleep(0.4)
        began = time.monotonic()
        await asyncio.to_thread(restart, private_server)
        return began

    try:
        *_, began = await asyncio.gather(*(user(5000 + u) for u in range(8)), restarter())
        # Recovery: the first turn after the restart that succeeds, and how long it took.
        probe = await rt.service.handle_message(Identity(6000), "after restart")
        recovered_in = time.monotonic() - began
        assert probe.ok, probe.reply
        await rt.service.drain()
        ok = [(uid, text) for uid, text, r in results if r.ok]
        failed = [r for _, _, r in results if not r.ok]
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT content FROM messages WHERE role = 'user'")
            stored = {row["content"].split("] ", 1)[1] for row in await cur.fetchall()}
        for _, text in ok:
            assert text in stored
        for r in failed:
            assert r.reply, "a failed turn still answers"
        logger.warning(
            "restart: %d turns, %d acknowledged, %d asked to retry, recovered in %.2fs",
            len(results),
            len(ok),
            len(failed),
            recovered_in,
        )
        assert len(ok) > len(results) // 2
    finally:
        await rt.close()
        await pool.close()
