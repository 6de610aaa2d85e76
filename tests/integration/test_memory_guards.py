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
from src.graph.tools import make_fact_tools
from src.services.factory import build_runtime
from src.storage.epochs import read_epoch
from src.storage.erasure_repo import ErasureRepository, MemberFacts
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


async def test_new_keeps_only_the_texts_still_waiting_for_extraction(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """/new read the pending messages, then an extraction still under way (it gave way,
    and goes on) marked the first before /new kept them: only the rest is kept. Before:
    the first was kept too, and its facts were extracted a second time from the text."""
    llm.default_reply = "ok"
    rt = await runtime_factory(facts_every=100, summary_trigger=1000)
    who = person()
    for text in ("my city is Berlin", "my job is pilot"):
        assert (await rt.service.handle_message(who, text)).ok
    await rt.service.drain()
    conversation = await rt.deps.conversations.get_or_create_conversation(who.owner_id)
    batches = await read_pending(rt.deps, who.owner_id, conversation)
    first = [row["id"] for row in await rt.deps.conversations.facts_pending(conversation, 2)]
    await rt.deps.conversations.mark_facts_extracted(conversation, first)
    assert rt.service.compactor is not None
    async with pool.connection() as conn, conn.transaction():
        assert await rt.service.compactor.pending.keep(batches, conn) == 1
    [kept] = await rt.service.compactor.pending.repo.of_owner(who.owner_id)
    assert "pilot" in kept["text"] and "Berlin" not in kept["text"]
    assert await rt.deps.conversations.facts_pending(conversation, 10) == []


async def test_remember_fact_stores_nothing_after_a_delete_its_turn_did_not_make(
    runtime_factory: Any, pool: Any
) -> None:
    """A group's turn began, then a delete of a member's memory reached the group (their
    /erase waits only for the groups it knew of when it began): the turn's remember_fact
    stores nothing. Before: it stored the fact after the delete."""
    rt = await runtime_factory()
    group, member = -100_980_000, 9801
    await rt.deps.users.get_or_create(group, None, "G", "en")
    async with pool.connection() as conn:
        began = await read_epoch(conn, group)
    remember = {t.name: t for t in make_fact_tools(rt.deps)}["remember_fact"]
    state = {"user_id": group, "member_id": member, "conversation_id": None}
    args = {"key": "city", "value": "Paris", "type": "fact", "state": state}
    with working_from(began):
        await ErasureRepository(pool).delete(group, MemberFacts(member))
        said = await remember.ainvoke(args)
    assert "nothing was remembered" in said
    assert await rt.deps.memory.list_facts(group, members=[0, member]) == []
    async with pool.connection() as conn:
        now = await read_epoch(conn, group)
    with working_from(now):  # a turn that began after the delete stores it
        assert "Remembered" in await remember.ainvoke(args)
    assert len(await rt.deps.memory.list_facts(group, members=[member])) == 1
