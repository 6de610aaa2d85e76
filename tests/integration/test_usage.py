"""Usage accounting (issue 18) through AgentService, real Postgres and the local model:
every call recorded with its purpose and owner, budgets, and the sums /usage reads."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from src.graph import prompts
from src.services.agent_service import Identity, TurnStream
from src.services.budget import Totals
from src.services.media import MediaReader, Upload
from src.services.reminders import ReminderService
from src.services.texts import t
from src.services.usage_report import UsageReports, render_owner
from tests.e2e.test_bot_reminders import go_quiet
from tests.fakes.audio import fake_speech
from tests.fakes.images import make_image
from tests.integration.test_cli_db import as_url, run_cli

ALICE = Identity(101, "alice", "Alice", "en", 101)
BOB = Identity(202, "bob", "Bob", "en", 202)


async def calls(rt: Any) -> list[dict[str, Any]]:
    """Return every recorded call, oldest first, after the pending writes."""
    await rt.service.drain()
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM llm_calls ORDER BY id")
        return list(await cur.fetchall())


def is_summary(request: dict[str, Any]) -> bool:
    return request["messages"][0]["content"] == prompts.SUMMARIZER_SYSTEM


def is_facts(request: dict[str, Any]) -> bool:
    return request["messages"][0]["content"] == prompts.FACTS_SYSTEM


async def test_turn_with_tools_and_summary_records_each_call(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory(max_context=4, summary_trigger=2, facts_every=2)
    for i in range(3):
        await rt.service.handle_message(ALICE, f"my cat is Barsik {i}")
    llm.script(
        {"tool_calls": [{"name": "search_history", "args": {"query": "Barsik"}}]},
        "Your cat is Barsik.",
    )
    result = await rt.service.handle_message(ALICE, "what is my cat called?")
    assert result.tools_used == ["search_history"]
    rows = await calls(rt)
    memory = llm.requests_for("memory-model")
    expected = Counter(
        reply=len(llm.requests_for("gpt-4o-mini")),
        summary=sum(map(is_summary, memory)),
        facts=sum(map(is_facts, memory)),
    )
    assert expected["summary"] >= 1 and expected["facts"] >= 1
    assert Counter(r["purpose"] for r in rows) == expected
    assert {r["owner_id"] for r in rows} == {ALICE.owner_id}
    assert all(r["status"] == "ok" and not r["estimated"] for r in rows)
    # The last turn: two replies (the tool call, the answer) and the work after them.
    last = [r for r in rows if r["turn_id"] == rows[-1]["turn_id"]]
    assert [r["purpose"] for r in last][:2] == ["reply", "reply"]
    # Tokens are the endpoint's usage: the fake counts 4 characters a token.
    answer = next(r for r in rows if r["purpose"] == "reply" and r["output_tokens"] == 4)
    assert answer["output_tokens"] == len("Your cat is Barsik.") // 4
    owner = await UsageReports(rt.service.usage).owner(ALICE.owner_id)
    assert owner.last_turn.calls == len(last) and owner.month.calls == len(rows)


async def test_a_turn_traces_its_model_calls_not_its_graph(
    runtime_factory: Any, llm: Any, monkeypatch: Any
) -> None:
    """The recorder is each model's own callback, not the run's: with it on the run, every
    node, edge and write of the graph was a traced run of its own (2.5 ms of a turn)."""
    from src.services.usage import UsageRecorder

    chains: list[str] = []

    async def on_chain_start(self: Any, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        chains.append(str(kwargs.get("name")))

    monkeypatch.setattr(UsageRecorder, "on_chain_start", on_chain_start)
    rt = await runtime_factory()
    llm.script({"tool_calls": [{"name": "search_history", "args": {"query": "cat"}}]}, "Barsik.")
    result = await rt.service.handle_message(ALICE, "what is my cat called?")
    assert result.ok and result.tools_used == ["search_history"]
    rows = await calls(rt)
    assert [r["purpose"] for r in rows if r["turn_id"] == rows[-1]["turn_id"]] == [
        "reply",
        "reply",
    ]
    assert all(r["owner_id"] == ALICE.owner_id for r in rows)
    assert chains == []


async def test_a_turns_usage_is_written_after_its_reply(
    runtime_factory: Any, llm: Any, monkeypatch: Any
) -> None:
    """Recording the reply's call is work for after the reply: held here until the caller
    has the reply, save_response's step has written nothing yet."""
    import asyncio
    import functools

    from src.graph.nodes import Nodes
    from src.storage.usage_repo import UsageRepository

    release, added = asyncio.Event(), []
    save, add = Nodes.save_response, UsageRepository.add

    @functools.wraps(save)
    async def held(self: Nodes, state: Any, config: Any) -> Any:
        update = await save(self, state, config)
        await release.wait()
        return update

    async def adding(self: UsageRepository, record: Any) -> None:
        added.append(record.purpose)
        await add(self, record)

    monkeypatch.setattr(Nodes, "save_response", held)
    monkeypatch.setattr(UsageRepository, "add", adding)
    rt = await runtime_factory()
    llm.script("Noted.")
    try:
        result = await asyncio.wait_for(rt.service.handle_message(ALICE, "hi"), timeout=10)
        await asyncio.sleep(0.2)
        assert result.reply == "Noted." and added == []
    finally:
        release.set()
    rows = await calls(rt)
    assert added == ["reply"] and [r["purpose"] for r in rows] == ["reply"]


async def test_streamed_turn_records_its_usage(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.script("a streamed answer, written piece by piece")
    stream = TurnStream(on_text=lambda _: None, on_tools=lambda _: None)
    result = await rt.service.handle_message(ALICE, "hello", stream=stream)
    assert result.ok
    assert llm.last_request()["stream_options"] == {"include_usage": True}
    [row] = await calls(rt)
    assert row["purpose"] == "reply" and not row["estimated"]
    assert row["output_tokens"] == len("a streamed answer, written piece by piece") // 4
    assert row["input_tokens"] > 0 and row["latency_ms"] > 0


async def test_missing_usage_is_estimated(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.reports_usage = False
    llm.script("an answer without any usage")
    await rt.service.handle_message(ALICE, "hello")
    [row] = await calls(rt)
    assert row["estimated"] and row["input_tokens"] > 0 and row["output_tokens"] > 0


async def test_cached_tokens_and_cost(runtime_factory: Any, llm: Any) -> None:
    prices = {"gpt-4o-mini": {"input": 1.0, "cached_input": 0.5, "output": 2.0}}
    rt = await runtime_factory(model_prices=prices)
    llm.cached_prompt_tokens = 20
    await rt.service.handle_message(ALICE, "hello")
    [row] = await calls(rt)
    assert row["cached_tokens"] == 20
    totals = (await UsageReports(rt.service.usage).owner(ALICE.owner_id)).today
    fresh = row["input_tokens"] - 20
    expected = (fresh * 1.0 + 20 * 0.5 + row["output_tokens"] * 2.0) / 1_000_000
    assert abs(totals.cost - expected) < 1e-12 and not totals.unpriced


async def test_failed_call_is_recorded_as_an_error(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.fail_next(1, status=500)
    result = await rt.service.handle_message(ALICE, "hello")
    assert not result.ok
    [row] = await calls(rt)
    assert row["status"] == "error" and row["error_class"] == "InternalServerError"
    assert row["input_tokens"] == 0 and row["owner_id"] == ALICE.owner_id


async def test_over_daily_budget_no_model_call(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(user_daily_tokens=50)
    await rt.service.handle_message(ALICE, "hello")  # spends more than 50 tokens
    await rt.service.drain()
    sent = len(llm.requests)
    result = await rt.service.handle_message(ALICE, "are you there?")
    assert result.ok and result.reply.startswith(t("over_budget", "en", when="")[:30])
    assert "00:00" in result.reply  # the next local midnight
    assert len(llm.requests) == sent
    conv = await rt.deps.conversations.get_or_create_conversation(ALICE.owner_id)
    rows = await rt.deps.conversations.load_last_messages(conv)
    assert rows[-1]["role"] == "user" and rows[-1]["content"].endswith("are you there?")
    # Another owner has a budget of their own.
    assert (await rt.service.handle_message(BOB, "hi")).reply != result.reply
    assert len(llm.requests) == sent + 1


async def test_admins_are_exempt(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(user_daily_tokens=1, admin_user_ids=[ALICE.owner_id])
    await rt.service.handle_message(ALICE, "hello")
    await rt.service.drain()
    llm.script("still answering")
    assert (await rt.service.handle_message(ALICE, "again")).reply == "still answering"
    # In a group (the chat owns the memory), an admin's message is answered too.
    group = Identity(-500, None, "Group", "en", ALICE.owner_id)
    await rt.service.handle_message(group, "hello")
    await rt.service.drain()
    llm.script("to the admin")
    assert (await rt.service.handle_message(group, "again")).reply == "to the admin"
    member = Identity(-500, None, "Group", "en", 999)
    assert "budget" in (await rt.service.handle_message(member, "me too")).reply


async def test_background_work_waits_while_over_budget(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(user_daily_tokens=1, session_idle_minutes=1)
    await rt.service.handle_message(ALICE, "my cat is Barsik")
    await rt.service.drain()
    sent = len(llm.requests)
    later = rt.deps.clock().replace(year=2100)
    assert await rt.service.compact_idle_sessions(now=later) == 0
    await go_quiet(rt.pool, ALICE.owner_id)
    reminders = ReminderService(rt.deps, rt.service.locks)
    stats = await reminders.run_once(send=lambda *_: _never())
    assert stats.over_budget == 1 and stats.sent == 0
    assert len(llm.requests) == sent
    user = await rt.deps.users.get(ALICE.owner_id)
    assert user is not None and user["last_reminded_at"] is None  # due again later
    rows = await calls(rt)
    assert {r["purpose"] for r in rows} == {"reply"}


async def test_owners_over_budget_do_not_hold_up_other_idle_sessions(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory(user_daily_tokens=1000, session_idle_minutes=1)
    spenders = [Identity(300 + i, None, f"U{i}", "en", 300 + i) for i in range(3)]
    for who in [*spenders, BOB]:
        llm.script("noted " * (1 if who is BOB else 1000))  # the spenders go over 1000
        await rt.service.handle_message(who, "hello")
    await rt.service.drain()
    later = rt.deps.clock().replace(year=2100)
    # A batch of two: the three spenders' sessions are older, but over budget.
    assert await rt.service.compact_idle_sessions(now=later, limit=2) == 1
    compacted = {r["owner_id"] for r in await calls(rt) if r["purpose"] == "compact"}
    assert compacted == {BOB.owner_id}


async def test_users_over_budget_do_not_hold_up_other_reminders(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory(user_daily_tokens=1000)
    spenders = [Identity(400 + i, None, f"U{i}", "en", 400 + i) for i in range(3)]
    for who in [*spenders, BOB]:
        llm.script("noted " * (1 if who is BOB else 1000))  # the spenders go over 1000
        await rt.service.handle_message(who, "hello")
    await rt.service.drain()
    for hours, who in enumerate([*spenders, BOB]):
        await go_quiet(rt.pool, who.owner_id, hours=50 - hours)  # the spenders longest
    sent: list[int] = []

    async def send(chat_id: int, text: str) -> None:
        sent.append(chat_id)

    llm.script("We miss you, Bob!")
    reminders = ReminderService(rt.deps, rt.service.locks, batch=2)
    stats = await reminders.run_once(send=send)
    assert sent == [BOB.owner_id]
    assert (stats.sent, stats.over_budget) == (1, 3)


async def _never() -> None:
    raise AssertionError("nothing is sent over budget")


async def test_every_purpose_is_recorded_with_its_owner(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(vision=True, embedding_provider="openai")
    await rt.service.handle_message(ALICE, "my cat is Barsik")
    llm.script({"tool_calls": [{"name": "search_history", "args": {"query": "cat"}}]}, "ok")
    await rt.service.handle_message(ALICE, "what cat?")
    await rt.service.compress(ALICE)
    reader = MediaReader(rt.deps, rt.service.usage)
    photo = Upload("photo", make_image(), "p.jpg", "image/jpeg")
    voice = Upload("voice", fake_speech("hello there"), "v.oga", "audio/ogg", seconds=3)
    await reader.read([photo, voice], "", "en", owner_id=ALICE.owner_id)
    await reader.close()
    sent: list[int] = []

    async def send(owner: int, text: str) -> None:
        sent.append(owner)

    await go_quiet(rt.pool, ALICE.owner_id)
    await ReminderService(rt.deps, rt.service.locks).run_once(send)
    assert sent == [ALICE.owner_id]
    await rt.service.new_conversation(ALICE)
    rows = await calls(rt)
    purposes = {r["purpose"] for r in rows if r["owner_id"] == ALICE.owner_id}
    assert purposes >= {
        "reply",
        "compact",
        "reminder",
        "describe",
        "transcription",
        "embedding",
        "facts",
    }
    voice_row = next(r for r in rows if r["purpose"] == "transcription")
    assert voice_row["audio_seconds"] == 3 and voice_row["estimated"]
    # The background embedding of stored messages belongs to no one.
    assert all(r["owner_id"] in (ALICE.owner_id, None) for r in rows)


async def test_compress_is_recorded(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(summary_trigger=1000)
    for i in range(6):
        await rt.service.handle_message(ALICE, f"message number {i}")
    llm.script("Nothing to compress.")
    result = await rt.service.compress(ALICE)
    assert result.ok
    rows = await calls(rt)
    assert [r["purpose"] for r in rows].count("compress") == 1
    assert next(r for r in rows if r["purpose"] == "compress")["owner_id"] == ALICE.owner_id


async def test_usage_text(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(user_daily_tokens=1000, model_prices={"gpt-4o-mini": {}})
    await rt.service.handle_message(ALICE, "hello")
    await calls(rt)
    owner = await UsageReports(rt.service.usage).owner(ALICE.owner_id)
    text = render_owner(owner, "en", 1000, 0)
    assert text.splitlines()[0] == t("usage_title", "en")
    assert "Last answer: " in text and "≈ $0.0000" in text
    assert "Budgets: 1000 a day, unlimited a month." in text
    empty = render_owner(await UsageReports(rt.service.usage).owner(BOB.owner_id), "ru", 0, 0)
    assert "Сегодня: ничего" in empty


@pytest.mark.slow
async def test_cli_usage_json(
    runtime_factory: Any, llm: Any, fresh_schema: str, tmp_path: Path
) -> None:
    rt = await runtime_factory()
    await rt.service.handle_message(ALICE, "hello")
    await calls(rt)
    prices = json.dumps({"gpt-4o-mini": {"input": 0.15, "output": 0.6}})
    done = run_cli(
        tmp_path,
        "usage",
        "--days",
        "1",
        "--json",
        DATABASE_URL=as_url(fresh_schema),
        MODEL_PRICES=prices,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [u["owner_id"] for u in report["users"]] == [ALICE.owner_id]
    assert report["users"][0]["name"] == "@alice" and report["users"][0]["calls"] == 1
    assert set(report["purposes"]) == {"reply"} and report["total"]["cost_usd"] > 0
    table = run_cli(tmp_path, "usage", DATABASE_URL=as_url(fresh_schema))
    assert table.returncode == 0 and "@alice (101)" in table.stdout
    # gpt-4o-mini has a default price (src/services/prices.py): no MODEL_PRICES needed.
    assert "no price" not in table.stdout and "$0.0001" in table.stdout


def test_totals_of_no_rows() -> None:
    assert Totals().tokens == 0
