"""Issue 31, deletion that deletes: /memory clear races nothing back, a deleted fact leaves
no line in the checkpoints, /erase leaves no trace anywhere in the database, /export holds
every stored message. Real PostgreSQL, the real `ChatOpenAI` client against the local
fake server (its memory model held back where a test races it).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from src.cli.chat import answer_line
from src.graph import prompts
from src.graph.memory.epoch import delete_in_turn, working_from
from src.services.agent_service import Identity
from src.services.factory import Runtime, build_runtime
from src.services.texts import t
from src.storage.checkpoint_redaction import REDACTED
from src.storage.epochs import read_epoch
from src.storage.erasure_repo import CompactId, FactKey
from src.storage.pg_client import make_pool
from tests.conftest import make_settings
from tests.db_scan import in_checkpoints, traces
from tests.fakes.memory_model import MEMORY_MODEL, memory_reply
from tests.fakes.openai_server import Fault, message_text

OWNERS = itertools.count(8_310_000)
BOUND = 20.0
MARK = "zqxmarker4711"
# A copy of an owner's checkpoints in a thread of no conversation.
ORPHAN = """
INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
                         checkpoint, metadata)
SELECT 'orphan-' || thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
       checkpoint, metadata
FROM checkpoints WHERE metadata ->> 'owner_id' = %s::text
"""


class Gate:
    """The memory model, holding back the requests of `systems` until `release`."""

    def __init__(self, *systems: str) -> None:
        self.systems = systems
        self.held: list[str] = []
        self.release = threading.Event()

    async def __call__(self, request: dict[str, Any]) -> Any:
        # Runs on the fake server's own loop and thread.
        system = message_text(request["messages"][0])
        if system in self.systems:
            self.held.append(system)
            while not self.release.is_set():
                await asyncio.sleep(0.02)
        return memory_reply(request)


async def until(condition: Any, timeout: float = BOUND) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def person() -> Identity:
    return Identity(next(OWNERS), "p", "P", "en")


async def rows(pool: Any, query: str, *params: Any) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        return list(await (await conn.execute(query, params)).fetchall())


async def facts_of(pool: Any, owner: int) -> list[str]:
    found = await rows(pool, "SELECT key, value FROM facts WHERE telegram_user_id = %s", owner)
    return [f"{r['key']}={r['value']}" for r in found]


async def compacts_of(pool: Any, owner: int) -> list[str]:
    query = "SELECT summary FROM session_compacts WHERE telegram_user_id = %s"
    return [r["summary"] for r in await rows(pool, query, owner)]


@pytest.mark.parametrize("clearer", ["same instance", "second instance"])
@pytest.mark.server
async def test_memory_clear_racing_extraction_and_compaction(
    fresh_schema: str, llm: Any, clearer: str
) -> None:
    """Fact extraction and a session's compact are under way (their model slow) when
    /memory clear comes, here or in a second instance on the same database: once they
    finish, nothing they made is stored, and nothing said before the clear comes back."""
    gate = Gate(prompts.FACTS_SYSTEM, prompts.COMPACT_SYSTEM)
    llm.default_for(MEMORY_MODEL, gate)
    llm.default_reply = "ok"
    settings = make_settings(llm, facts_every=1, summary_trigger=1000, session_idle_minutes=30)
    pools = [make_pool(fresh_schema, 1, 5) for _ in range(2)]
    for p in pools:
        await p.open()
    a, b = [await build_runtime(settings, pool=p) for p in pools]
    try:
        for rt in (a, b):
            assert rt.service.compactor is not None
            rt.service.compactor.wait_seconds = 0.5
        who, pool = person(), pools[0]
        result = await a.service.handle_message(who, "my city is Berlin. my job is pilot.")
        assert result.ok
        await until(lambda: prompts.FACTS_SYSTEM in gate.held)
        # The session ends by silence (the job): its compact waits for the slow model.
        later = a.deps.clock() + timedelta(minutes=31)
        ending = asyncio.ensure_future(a.service.compact_idle_sessions(now=later))
        await until(lambda: prompts.COMPACT_SYSTEM in gate.held)
        service = (a if clearer == "same instance" else b).service
        await asyncio.wait_for(service.clear_memory(who), BOUND)
        assert await facts_of(pool, who.owner_id) == []
        assert await compacts_of(pool, who.owner_id) == []
        gate.release.set()
        await asyncio.wait_for(ending, BOUND)
        for rt in (a, b):
            await asyncio.wait_for(rt.service.drain(), BOUND)
        assert await facts_of(pool, who.owner_id) == []
        assert await compacts_of(pool, who.owner_id) == []
        # Nothing said before the clear comes back with later memory work either.
        assert (await b.service.handle_message(who, "hello again")).ok
        await b.service.drain()
        assert await facts_of(pool, who.owner_id) == []
        # The session after the clear is compacted, and only it.
        assert await b.service.compact_idle_sessions(now=later + timedelta(hours=1)) == 1
        compacts = await compacts_of(pool, who.owner_id)
        assert len(compacts) == 1 and "hello again" in compacts[0]
        assert "Berlin" not in compacts[0] and "pilot" not in compacts[0]
    finally:
        gate.release.set()
        for rt in (a, b):
            await rt.close()
        for p in pools:
            await p.close()


async def _fact_in_the_prompt(rt: Runtime, llm: Any, who: Identity) -> None:
    """Store `diagnosis: flu` as a fact, then a turn whose prompt carries it."""
    assert (await rt.service.handle_message(who, "my diagnosis is flu")).ok
    await rt.service.drain()
    assert (await rt.service.handle_message(who, "what do you know?")).ok
    await rt.service.drain()
    request = llm.requests_for(rt.settings.llm_model)[-1]["messages"]
    assert any("- diagnosis: flu" in message_text(m) for m in request)


@pytest.mark.parametrize("how", ["/memory clear", "the fact alone"])
async def test_a_deleted_fact_leaves_no_line_in_the_checkpoints(
    runtime_factory: Any, llm: Any, pool: Any, how: str
) -> None:
    """The prompt's `- diagnosis: flu` line is in the turn's checkpoints (zlib-compressed)
    until the fact is deleted; then none holds it, and the records still read."""
    rt = await runtime_factory(facts_every=1, summary_trigger=1000)
    who = person()
    await _fact_in_the_prompt(rt, llm, who)
    assert await in_checkpoints(pool, "diagnosis: flu")
    if how == "/memory clear":
        assert await rt.service.clear_memory(who) == (1, 0)
    else:
        deleted = await rt.service.delete_memory(who, FactKey("diagnosis"))
        assert (deleted.facts, deleted.compacts) == (1, 0)
    assert await in_checkpoints(pool, "diagnosis: flu") == []
    # `tgagent runs show` and replay read every checkpoint of the thread as before.
    conversation = await rt.deps.conversations.get_or_create_conversation(who.owner_id)
    config = {"configurable": {"thread_id": str(conversation)}}
    seen = [repr(tup) async for tup in rt.checkpointer.alist(config)]
    assert seen and not any("diagnosis: flu" in s for s in seen)
    assert any(REDACTED in s for s in seen)
    assert (await rt.service.handle_message(who, "and now?")).ok


async def test_a_deleted_compact_leaves_no_line_in_the_checkpoints(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """A previous conversation's compact is in a turn's prompt ("Previous conversations")
    and so in its checkpoints, until it is deleted."""
    llm.default_reply = "ok"
    rt = await runtime_factory(summary_trigger=1000, session_idle_minutes=30)
    who = person()
    assert (await rt.service.handle_message(who, "we planned the trip to Lisbon")).ok
    await rt.service.drain()
    later = rt.deps.clock() + timedelta(minutes=31)
    assert await rt.service.compact_idle_sessions(now=later) == 1
    assert (await rt.service.handle_message(who, "hello")).ok
    await rt.service.drain()
    compact = (await rt.deps.memory.list_compacts(who.owner_id))[0]
    summary = compact["summary"]  # the memory model's: "Talked about: we planned ..."
    assert "Lisbon" in summary and await in_checkpoints(pool, summary)
    deleted = await rt.service.delete_memory(who, CompactId(compact["id"]))
    assert deleted.compacts == 1
    assert await in_checkpoints(pool, summary) == []
    # The conversation's messages are not memory: they stay, in the records too.
    assert await traces(pool, "trip to Lisbon", ("messages",))
    assert await in_checkpoints(pool, "trip to Lisbon")


async def test_a_delete_inside_a_turn_moves_its_epoch_and_redacts_it_after(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """A tool deletes a fact inside the owner's turn: the turn's later work stores again
    (its epoch moved along), older work does not, and the turn's own checkpoints are
    redacted once written."""
    rt = await runtime_factory(facts_every=1, summary_trigger=1000)
    who = person()
    await _fact_in_the_prompt(rt, llm, who)
    async with pool.connection() as conn:
        before = await read_epoch(conn, who.owner_id)
    with working_from(before) as work:
        await delete_in_turn(rt.deps, who.owner_id, FactKey("diagnosis"))
        assert work.epoch != before and work.deleted
    async with pool.connection() as conn:
        assert await read_epoch(conn, who.owner_id) == work.epoch
        assert await work.epoch.holds(conn) and not await before.holds(conn)
    conversation = await rt.deps.conversations.get_or_create_conversation(who.owner_id)
    await rt.service.eraser.after_turn(str(conversation), work)
    assert await in_checkpoints(pool, "diagnosis: flu") == []


async def test_a_fact_a_tool_forgets_leaves_the_turns_record_with_the_reply(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """Found by the privacy property test (tests/e2e/test_privacy_property.py): the
    model's `forget_fact` deleted a fact the turn's prompt showed, the user had the
    answer, and the turn's record (written at the reply) still held `- diagnosis: flu`
    for as long as the memory work after the reply ran (for good, had the process
    stopped then): it was redacted only when the turn ended. Now at the reply."""
    rt = await runtime_factory(facts_every=1, summary_trigger=1000)
    who = person()
    await _fact_in_the_prompt(rt, llm, who)
    gate = Gate(prompts.FACTS_SYSTEM)  # the memory work after the reply waits
    llm.default_for(MEMORY_MODEL, gate)
    forget = {"tool_calls": [{"name": "forget_fact", "args": {"key": "diagnosis"}}]}
    llm.script_for(rt.settings.llm_model, forget, "Forgotten.")
    try:
        result = await rt.service.handle_message(who, "forget my diagnosis")
        assert result.reply == "Forgotten." and result.tools_used == ["forget_fact"]
        await until(lambda: prompts.FACTS_SYSTEM in gate.held)  # the turn goes on
        # Well within the 10 s the turn's memory work may take before the turn ends.
        deadline = time.monotonic() + 5
        while await in_checkpoints(pool, "diagnosis: flu"):
            assert time.monotonic() < deadline, "the turn's record still shows the fact"
            await asyncio.sleep(0.05)
    finally:
        gate.release.set()
    await rt.service.drain()
    assert await in_checkpoints(pool, "diagnosis: flu") == []


async def test_erase_leaves_no_trace_of_what_the_user_wrote(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """After /erase, no table of the database holds the marker the user wrote: messages,
    summary, facts, compacts, embeddings, checkpoints, kept texts; another user's data
    stays, and so do the usage totals, without ids that lead back."""
    llm.default_reply = "noted"
    rt = await runtime_factory(
        facts_every=1,
        max_context=2,
        summary_trigger=1,
        session_idle_minutes=30,
        embedding_provider="openai",
        embedding_model="fake-embed",
    )
    who, other = person(), person()
    assert (await rt.service.handle_message(other, "my pet is a cat")).ok
    # A text kept for its facts: /new while the memory model fails.
    llm.default_for(MEMORY_MODEL, lambda request: Fault(503))
    assert (await rt.service.handle_message(who, f"my locker is {MARK}-7")).ok
    await rt.service.new_conversation(who)
    await rt.service.drain()
    llm.default_for(MEMORY_MODEL, memory_reply)
    for text in (f"my code is {MARK}", f"say {MARK} back", "one more", "and more"):
        assert (await rt.service.handle_message(who, text)).ok
        await rt.service.drain()
    later = rt.deps.clock() + timedelta(minutes=31)
    assert await rt.service.compact_idle_sessions(now=later) >= 1
    assert rt.embeddings is not None
    await rt.embeddings.drain()
    found = set(await traces(pool, MARK))
    wanted = {"conversations.summary", "facts.value", "messages.content", "pending_facts.text"}
    assert wanted | {"session_compacts.summary"} <= found
    assert any(f.startswith("checkpoint") for f in found)
    vectors = "SELECT count(*) AS n FROM message_embeddings WHERE owner_id = %s"
    assert (await rows(pool, vectors, who.owner_id))[0]["n"] > 0
    # A thread /new failed to delete is found by its runs' metadata, and goes too.
    runs = "SELECT count(*) AS n FROM checkpoints WHERE metadata ->> 'owner_id' = %s::text"
    async with pool.connection() as conn:
        await conn.execute(ORPHAN, (who.owner_id,))
    assert (await rows(pool, runs, who.owner_id))[0]["n"] > 0
    erased = await rt.service.erase(who)
    assert erased.count("users") == 1 and erased.threads >= 1
    assert await traces(pool, MARK) == []
    assert (await rows(pool, vectors, who.owner_id))[0]["n"] == 0
    assert (await rows(pool, runs, who.owner_id))[0]["n"] == 0
    kept = await rows(pool, "SELECT owner_id FROM messages WHERE owner_id = %s", other.owner_id)
    assert len(kept) == 2 and await facts_of(pool, other.owner_id) == ["pet=a cat"]
    calls = await rows(pool, "SELECT * FROM llm_calls WHERE owner_id = %s", who.owner_id)
    assert calls and all(c["conversation_id"] is None and c["turn_id"] is None for c in calls)
    # One row per day, purpose, model and outcome: no single call is left.
    assert all(c["latency_ms"] is None for c in calls)
    keys = {(c["at"].date(), c["purpose"], c["model"], c["status"], c["estimated"]) for c in calls}
    assert len(calls) == len(keys) and sum(c["calls"] for c in calls) > len(calls)
    # The owner can start again, from nothing.
    assert (await rt.service.handle_message(who, "hello")).ok
    assert (await rt.service.memory_report(who))["facts"] == []


async def test_export_holds_everything_stored(runtime_factory: Any, llm: Any, pool: Any) -> None:
    """/export's JSON holds every stored message, the summary, the facts with their
    history and the usage totals; its Markdown twin reads the same."""
    llm.default_reply = "noted"
    rt = await runtime_factory(facts_every=1, max_context=2, summary_trigger=1)
    who = person()
    for text in ("my city is Berlin", "it rains", "my city is Paris", "and the sun shines"):
        assert (await rt.service.handle_message(who, text)).ok
        await rt.service.drain()
    files = await rt.service.export(who)
    assert [f.name.rsplit(".", 1)[1] for f in files] == ["json", "md"]
    data = json.loads(files[0].data)
    markdown = files[1].data.decode()
    stored = await rows(
        pool,
        "SELECT m.content FROM messages m JOIN conversations c ON c.id = m.conversation_id"
        " WHERE c.telegram_user_id = %s",
        who.owner_id,
    )
    exported = [m["content"] for c in data["conversations"] for m in c["messages"]]
    assert len(stored) >= 8 and sorted(exported) == sorted(r["content"] for r in stored)
    assert all(line in markdown for r in stored for line in r["content"].splitlines())
    assert data["conversations"][0]["summary"]
    city = next(f for f in data["facts"] if f["key"] == "city")
    assert city["value"] == "Paris" and [h["value"] for h in city["history"]] == ["Berlin"]
    assert data["usage"] and data["usage"][0]["calls"] >= 4


async def test_the_terminal_chat_exports_and_erases_after_confirmation(
    runtime_factory: Any, llm: Any, pool: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """`tgagent chat`: /export writes its files to the working directory and prints their
    paths; a bare /erase only asks (nothing is deleted); /erase yes erases."""
    llm.default_reply = "noted"
    rt = await runtime_factory()
    who = person()
    assert (await rt.service.handle_message(who, f"remember {MARK}")).ok
    monkeypatch.chdir(tmp_path)
    said = await answer_line(rt.service, who, "/export")
    paths = [Path(p) for p in said.splitlines()[1:]]
    assert [p.parent for p in paths] == [tmp_path, tmp_path]
    assert all(MARK in p.read_text() for p in paths)
    assert await answer_line(rt.service, who, "/erase") == t("erase_confirm_terminal", "en")
    assert "messages.content" in await traces(pool, MARK)
    said = await answer_line(rt.service, who, "/erase yes")
    assert said == t("erased", "en", messages=2, facts=0, compacts=0)
    assert await traces(pool, MARK) == []


async def test_erase_keeps_usage_as_daily_totals_and_the_budget_as_spent(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """/erase leaves the owner's model calls as daily totals: the same tokens and calls,
    one row per day, purpose and model, no conversation or turn; the budget of the month
    counts them still (erasing does not reset it), and days before the month keep no id."""
    llm.default_reply = "noted"
    rt = await runtime_factory(facts_every=1)
    who = person()
    for text in ("one", "two", "three"):
        assert (await rt.service.handle_message(who, text)).ok
        await rt.service.drain()
    old = rt.deps.clock() - timedelta(days=70)
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO llm_calls (at, owner_id, purpose, model, input_tokens, output_tokens)"
            " VALUES (%s, %s, 'reply', 'old-model', 1000, 10), (%s, %s, 'reply', 'old-model',"
            " 500, 5)",
            (old, who.owner_id, old + timedelta(minutes=1), who.owner_id),
        )
    totals = """
    SELECT sum(calls)::int AS calls, sum(input_tokens)::int AS input,
           sum(output_tokens)::int AS output, count(*)::int AS rows
    FROM llm_calls WHERE owner_id = %s AND model <> 'old-model'
    """
    before = (await rows(pool, totals, who.owner_id))[0]
    assert before["rows"] >= 3 and before["calls"] == before["rows"]
    assert rt.service.usage is not None
    budget = rt.service.usage.budget
    spent = await budget.spent(who.owner_id)
    assert spent.month.tokens > 0

    await rt.service.erase(who)

    after = (await rows(pool, totals, who.owner_id))[0]
    assert (after["calls"], after["input"], after["output"]) == (
        before["calls"],
        before["input"],
        before["output"],
    )
    assert after["rows"] < before["rows"]
    assert (await budget.spent(who.owner_id)).month == spent.month
    ids = "SELECT owner_id, calls, input_tokens FROM llm_calls WHERE model = 'old-model'"
    assert await rows(pool, ids) == [{"owner_id": None, "calls": 2, "input_tokens": 1500}]
