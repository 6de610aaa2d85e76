"""Two service instances (as two bot processes behind a load balancer) on one database
receive one chat's messages alternately: turns are serialized, history stays consistent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from src.graph import prompts
from src.services.agent_service import Identity
from src.services.factory import build_runtime
from src.storage.pg_client import make_pool
from tests.conftest import make_settings
from tests.fakes.memory_model import MEMORY_MODEL
from tests.integration.test_memory_gives_way import BOUND, HANG, HangFirst
from tests.memory_ledger import Ledger

pytestmark = pytest.mark.server

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


async def test_memory_work_gives_way_to_a_turn_of_another_instance(
    fresh_schema: str, llm: Any
) -> None:
    """Issue 16: the summary model hangs (60 s) in instance A's memory work after a reply;
    the owner's next message, handled by instance B, waits for it about a second, not 60
    (A's turn gives way; its call goes on outside the turn, issue 30)."""
    pools = [make_pool(fresh_schema, 1, 5) for _ in range(2)]
    for p in pools:
        await p.open()
    ledger = Ledger()
    hang = HangFirst(ledger, prompts.SUMMARIZER_SYSTEM)
    llm.default_for(MEMORY_MODEL, hang)
    llm.default_reply = "ok"
    settings = make_settings(llm, max_context=2, summary_trigger=1, llm_timeout=HANG)
    a, b = [await build_runtime(settings, pool=p) for p in pools]
    try:
        for i in range(6):
            assert (await asyncio.wait_for(a.service.handle_message(CHAT, f"u{i}"), BOUND)).ok
            drained = asyncio.ensure_future(a.service.drain())
            while not drained.done() and not hang.hung:
                await asyncio.sleep(0.02)
            if hang.hung:
                break
        assert hang.hung
        assert (await asyncio.wait_for(b.service.handle_message(CHAT, "u9"), BOUND)).ok
        # A's hung call goes on in the background (not cancelled and sent again) until
        # the model fails it; the next turn folds what it could not.
        hang.release.set()
        await asyncio.wait_for(drained, BOUND)
        assert (await asyncio.wait_for(b.service.handle_message(CHAT, "u10"), BOUND)).ok
        await asyncio.wait_for(b.service.drain(), BOUND)
        assert len(hang.hung) == 1 and ledger.of_kind(prompts.SUMMARIZER_SYSTEM)
        assert max(ledger.summarized().values(), default=0) <= 1
    finally:
        hang.release.set()
        for rt in (a, b):
            await rt.close()
        for p in pools:
            await p.close()


async def test_a_turn_reads_its_conversation_once_the_lease_is_its(
    fresh_schema: str, llm: Any
) -> None:
    """A turn reads the owner's conversation in the round trip that asks for the lease.
    While another instance holds the lease and starts a new conversation (/new deletes
    the old one), the waiting turn's first read sees the old one: it must read again
    once the lease is its, and store the message in the new one."""
    pools = [make_pool(fresh_schema, 1, 5) for _ in range(2)]
    for p in pools:
        await p.open()
    settings = make_settings(llm, summary_trigger=1000)
    a, b = [await build_runtime(settings, pool=p) for p in pools]
    try:
        assert (await b.service.handle_message(CHAT, "first")).ok
        repo = a.deps.conversations
        old = await repo.get_or_create_conversation(CHAT.owner_id)
        async with a.service.locks.hold(CHAT.owner_id):
            turn = asyncio.ensure_future(b.service.handle_message(CHAT, "second"))
            async with pools[0].connection() as conn:
                while True:  # B asked for the lease: its first reads are done
                    cur = await conn.execute(
                        "SELECT wanted FROM turn_leases WHERE owner_id = %s", (CHAT.owner_id,)
                    )
                    row = await cur.fetchone()
                    if row is not None and row["wanted"]:
                        break
                    await asyncio.sleep(0.01)
            new = await repo.create_new_conversation(CHAT.owner_id)
        result = await asyncio.wait_for(turn, 10)
        assert result.ok and result.conversation_id == str(new) != str(old)
        rows = await repo.load_last_messages(new, limit=10)
        assert [r["role"] for r in rows] == ["user", "assistant"]
        assert "second" in rows[0]["content"]
    finally:
        for rt in (a, b):
            await rt.close()
        for p in pools:
            await p.close()
