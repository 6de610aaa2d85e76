"""Issue 40, the guard of memory work: what /forget forgets becomes no fact, even when
the extraction was under way (its model slow) when /forget came, here or in a second
process. Real PostgreSQL, the real `ChatOpenAI` client against the local fake server.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from src.graph import prompts
from src.graph.memory.epoch import working_from
from src.graph.memory.facts import extract_batch, read_pending
from src.services.factory import build_runtime
from src.storage.epochs import read_epoch
from src.storage.pg_client import make_pool
from tests.conftest import make_settings
from tests.db_scan import traces
from tests.fakes.memory_model import MEMORY_MODEL
from tests.fakes.openai_server import message_text
from tests.integration.test_memory_erasure import BOUND, Gate, facts_of, person, until

SECRET = "hunter2"


@pytest.mark.parametrize("forgetter", ["same instance", "second instance"])
async def test_forget_stops_the_fact_extraction_under_way(
    fresh_schema: str, llm: Any, forgetter: str
) -> None:
    """Before: "my password is hunter2", /forget while its extraction waits for the slow
    memory model: once the model answered, `password = hunter2` was stored and was in
    the next prompt."""
    gate = Gate(prompts.FACTS_SYSTEM)
    llm.default_for(MEMORY_MODEL, gate)
    llm.default_reply = "ok"
    settings = make_settings(llm, facts_every=1, summary_trigger=1000)
    pools = [make_pool(fresh_schema, 1, 5) for _ in range(2)]
    for p in pools:
        await p.open()
    a, b = [await build_runtime(settings, pool=p) for p in pools]
    try:
        who, pool = person(), pools[0]
        assert (await a.service.handle_message(who, f"my password is {SECRET}")).ok
        await until(lambda: prompts.FACTS_SYSTEM in gate.held)
        forgetting = (a if forgetter == "same instance" else b).service
        await asyncio.wait_for(forgetting.forget(who), BOUND)
        gate.release.set()
        for rt in (a, b):
            await asyncio.wait_for(rt.service.drain(), BOUND)
        # The extraction did answer: its facts were dropped, not never asked for.
        answered = llm.requests_for(MEMORY_MODEL)
        assert any(SECRET in message_text(r["messages"][-1]) for r in answered)
        assert await facts_of(pool, who.owner_id) == []
        assert await traces(pool, SECRET, ("facts", "pending_facts", "session_compacts")) == []
        seen = len(llm.requests_for(settings.llm_model))
        assert (await b.service.handle_message(who, "what do you know about me?")).ok
        for rt in (a, b):
            await asyncio.wait_for(rt.service.drain(), BOUND)
        requests = llm.requests_for(settings.llm_model)[seen:]
        assert requests
        assert not any(SECRET in message_text(m) for r in requests for m in r["messages"])
        assert await facts_of(pool, who.owner_id) == []
    finally:
        gate.release.set()
        for rt in (a, b):
            await rt.close()
        for p in pools:
            await p.close()


async def test_facts_are_stored_only_from_messages_still_waiting(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """The rows an extraction read are marked by someone else before it writes (another
    process's extraction took them; the epoch did not move): it stores nothing from
    them. Before: the facts were stored a second time, whatever had marked the rows."""
    llm.default_reply = "ok"
    rt = await runtime_factory(facts_every=100, summary_trigger=1000)
    who = person()
    assert (await rt.service.handle_message(who, f"my password is {SECRET}")).ok
    await rt.service.drain()
    conversation = await rt.deps.conversations.get_or_create_conversation(who.owner_id)
    [batch] = await read_pending(rt.deps, who.owner_id, conversation)
    async with pool.connection() as conn:
        epoch = await read_epoch(conn, who.owner_id)
    assert await rt.deps.conversations.skip_facts(conversation) == 2
    with working_from(epoch):
        assert await extract_batch(rt.deps, batch) == 0
    assert any(SECRET in message_text(r["messages"][-1]) for r in llm.requests_for(MEMORY_MODEL))
    assert await facts_of(pool, who.owner_id) == []
