"""Two service instances (as two bot processes behind a load balancer) on one database
receive one chat's messages alternately: turns are serialized, history stays consistent."""

from __future__ import annotations

import asyncio
from typing import Any

from src.services.agent_service import Identity
from src.services.factory import build_runtime
from src.storage.pg_client import make_pool
from tests.conftest import make_settings

CHAT = Identity(7777, language_code="en")


async def test_alternating_instances_serialize_turns(fresh_schema: str, llm: Any) -> None:
    pools = [make_pool(fresh_schema, 1, 5) for _ in range(2)]
    for p in pools:
        await p.open()
    settings = make_settings(llm, summary_trigger=1000)
    runtimes = [await build_runtime(settings, pool=p) for p in pools]
    llm.delay = 0.02
    llm.concurrency_key = lambda req: "one chat"
    try:
        results = await asyncio.gather(
            *(runtimes[i % 2].service.handle_message(CHAT, f"m{i}") for i in range(12))
        )
        assert all(r.ok for r in results)
        assert llm.overlaps == 0 and llm.max_concurrent == 1
        repo = runtimes[0].deps.conversations
        conv = await repo.get_or_create_conversation(CHAT.owner_id)
        rows = await repo.load_last_messages(conv, limit=100)
        assert [r["role"] for r in rows] == ["user", "assistant"] * 12
        assert [r["number"] for r in rows] == list(range(1, 25))
        # Each turn saw exactly the exchanges before it: 2 stored messages per earlier turn.
        chat = [req for req in llm.requests if req["model"] == settings.llm_model]
        sizes = sorted(len(req["messages"]) - 2 for req in chat)
        assert sizes == [2 * k for k in range(12)]
    finally:
        for rt in runtimes:
            await rt.close()
        for p in pools:
            await p.close()
