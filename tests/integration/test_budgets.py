"""Budgets that hold (issue 34): per person in groups, before every model call of a turn,
in dollars (transcribed minutes too), and cancelled calls recorded. Real PostgreSQL, the
real ChatOpenAI client against the fake OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import gc
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import HumanMessage

from src.graph.model_calls import OverBudget, call_config
from src.services.agent_service import Identity
from src.services.budget import Budget
from src.services.media import MediaReader, Upload
from src.services.texts import t
from src.services.usage import recorded
from src.services.usage_report import UsageReports, render_owner
from src.storage.usage_repo import UsageRepository
from src.storage.users_repo import UsersRepository
from tests.conftest import make_settings
from tests.e2e.conftest import until
from tests.fakes.audio import fake_speech
from tests.integration.test_usage import calls

ALICE = Identity(101, "alice", "Alice", "en", 101)
BOB = Identity(202, "bob", "Bob", "en", 202)
GROUP = -100_777


def in_group(sender: Identity) -> Identity:
    """Return the identity of `sender`'s message in GROUP (the group owns the memory)."""
    return Identity(GROUP, None, "Friends", "en", sender.owner_id)


def over_budget(reply: str) -> bool:
    return reply.startswith(t("over_budget", "en", when="")[:30])


async def test_a_group_turn_spends_the_senders_own_budget(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(user_daily_tokens=50)
    await rt.service.handle_message(ALICE, "hello")  # more than 50 tokens
    await rt.service.drain()
    sent = len(llm.requests)
    # A fresh group is no fresh budget: Alice's own is spent.
    refused = await rt.service.handle_message(in_group(ALICE), "hello everyone")
    assert over_budget(refused.reply) and len(llm.requests) == sent
    # Bob spends in the group first: the group's turn counts against him too.
    other = await runtime_factory(user_daily_tokens=50)
    await other.service.handle_message(
        Identity(GROUP - 1, None, "Others", "en", BOB.owner_id), "hi all"
    )
    await other.service.drain()
    rows = [r for r in await calls(other) if r["owner_id"] == GROUP - 1]
    assert rows and {r["sender_id"] for r in rows} == {BOB.owner_id}
    sent = len(llm.requests)
    assert over_budget((await other.service.handle_message(BOB, "and me?")).reply)
    assert len(llm.requests) == sent


async def test_the_budget_is_checked_before_every_model_call(
    runtime_factory: Any, llm: Any
) -> None:
    """A turn that starts within budget stops at its next call once it is spent: no tool
    round after it, no memory work, and the user hears why."""
    rt = await runtime_factory(user_daily_tokens=100, summary_trigger=1, facts_every=1)
    llm.script(
        {"tool_calls": [{"name": "search_history", "args": {"query": "cat"}}]},
        "never said",
    )
    result = await rt.service.handle_message(ALICE, "what is my cat called?")
    assert "never said" not in result.reply
    assert result.reply.startswith(t("budget_ran_out", "en", when="")[:40])
    await rt.service.drain()
    assert len(llm.requests) == 1  # the first call only: ~300 tokens, over 100
    assert [r["purpose"] for r in await calls(rt)] == ["reply"]


async def test_a_refused_call_leaves_no_callback_unrun(runtime_factory: Any, llm: Any) -> None:
    """The budget refuses a call before it is made, and every other handler of the model
    still sees its start: none is left created and never awaited (a RuntimeWarning that
    the test run makes an error)."""
    rt = await runtime_factory(user_daily_tokens=50)
    await rt.service.handle_message(ALICE, "hello")  # more than 50 tokens
    await rt.service.drain()
    seen: list[str] = []

    class Spy(AsyncCallbackHandler):
        run_inline = True

        async def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
            seen.append("start")

    model = recorded(
        GenericFakeChatModel(messages=iter(["hi"]), callbacks=[Spy()]), rt.service.usage
    )
    assert model is not None
    config = call_config("reply", ALICE.owner_id)
    config["metadata"]["turn_id"] = "t-1"
    with pytest.raises(OverBudget):
        await model.ainvoke([HumanMessage("hello again")], config)
    gc.collect()
    assert seen == ["start"]
    assert not rt.service.usage.recorder.unwritten(ALICE.owner_id)  # a refused call is no call


async def test_dollar_budget_counts_each_models_price(runtime_factory: Any, llm: Any) -> None:
    """The same turns cost more on a pricier model: the budget in dollars sees it."""
    prices = {"gpt-4o-mini": {"input": 0.15, "output": 0.6}, "pricey": {"input": 100}}
    rt = await runtime_factory(
        user_daily_usd=0.01,
        model_prices=prices,
        model_choices={"gpt-4o-mini": None, "pricey": None},
    )
    for _ in range(3):  # ~1000 tokens of gpt-4o-mini: $0.0002
        assert not over_budget((await rt.service.handle_message(ALICE, "hello")).reply)
    await rt.service.drain()
    await rt.service.handle_message(BOB, "hello")
    assert await rt.service.set_model(BOB, "pricey")  # /model
    await rt.service.handle_message(BOB, "hello")  # ~300 tokens at $100 per million: $0.03
    await rt.service.drain()
    sent = len(llm.requests)
    assert over_budget((await rt.service.handle_message(BOB, "again")).reply)
    assert len(llm.requests) == sent
    spent = await rt.service.usage.budget.spent(BOB.owner_id)
    assert spent.day.usd > 0.01 and spent.day.tokens < 1000
    assert llm.requests_for("pricey")
    text = render_owner(await UsageReports(rt.service.usage).owner(BOB.owner_id), "en", 0, 0, 0.01)
    assert text.splitlines()[-1] == "Budgets in dollars: $0.01 a day, unlimited a month."


async def test_transcribed_minutes_are_charged(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(
        user_daily_usd=0.05, model_prices={"whisper-1": {"audio_minute": 0.006}}
    )
    reader = MediaReader(rt.deps, rt.service.usage)
    voice = Upload("voice", fake_speech("hello there"), "v.oga", "audio/ogg", seconds=600)
    await reader.read([voice], "", "en", owner_id=ALICE.owner_id)
    await reader.close()
    await rt.service.drain()
    sent = len(llm.requests)
    assert over_budget((await rt.service.handle_message(ALICE, "hi")).reply)
    assert len(llm.requests) == sent
    spent = await rt.service.usage.budget.spent(ALICE.owner_id)
    assert spent.day.usd == pytest.approx(0.06)  # ten minutes at $0.006
    # A voice note in a group is charged to its sender too.
    reader = MediaReader(rt.deps, rt.service.usage)
    await reader.read([voice], "", "en", owner_id=GROUP, sender_id=BOB.owner_id)
    await reader.close()
    await rt.service.drain()
    assert (await rt.service.usage.budget.spent(BOB.owner_id)).day.usd == pytest.approx(0.06)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_cancelled_call_is_recorded_as_estimated(
    runtime_factory: Any, llm: Any, stream: bool
) -> None:
    """Memory work that gives way, a shutdown: the provider bills a call cut off half-way,
    so it is recorded (its prompt counted, estimated) and forgotten."""
    rt = await runtime_factory()
    model = rt.deps.summary_model
    recorder = rt.service.usage.recorder
    prompt = [HumanMessage("summarize this long conversation about cats " * 20)]
    config = call_config("summary", ALICE.owner_id)
    llm.delay_next(1, 30)

    async def call() -> None:
        if stream:
            async for _ in model.astream(prompt, config):
                pass
        else:
            await model.ainvoke(prompt, config)

    task = asyncio.create_task(call())
    await until(lambda: llm.in_flight == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [row] = await calls(rt)
    assert row["purpose"] == "summary" and row["owner_id"] == ALICE.owner_id
    assert row["status"] == "error" and row["error_class"] == "CancelledError"
    assert row["estimated"] and row["input_tokens"] >= 100 and row["output_tokens"] == 0
    assert recorder._started == {}


async def test_budget_days_are_the_owners_own(pool: Any) -> None:
    """Issue 35: a person who set a time zone (/tz) has their budget's day and month in it
    (spent, when it resets, the warning's period), not in the server's TIMEZONE."""
    now = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)  # 15:00 in Moscow, 04:00 in Los Angeles
    settings = make_settings(timezone="Europe/Moscow", user_daily_tokens=1000)
    usage = UsageRepository(pool)
    budget = Budget(usage, settings, lambda: now)
    users = UsersRepository(pool)
    await users.set_timezone(ALICE.owner_id, "America/Los_Angeles")
    async with pool.connection() as conn:
        for person in (ALICE.owner_id, BOB.owner_id):
            # 06:00 UTC: today in Moscow (09:00), yesterday in Los Angeles (22:00 on the 26th).
            await conn.execute(
                "INSERT INTO llm_calls (owner_id, purpose, model, input_tokens, output_tokens,"
                " at) VALUES (%s, 'reply', 'gpt-4o-mini', 900, 0, %s)",
                (person, now - timedelta(hours=6)),
            )
    alice, bob = await budget.spent(ALICE.owner_id), await budget.spent(BOB.owner_id)
    assert (alice.day.tokens, alice.month.tokens) == (0, 900)
    assert (bob.day.tokens, bob.month.tokens) == (900, 900)
    [warned] = await budget.warnings(BOB.owner_id)  # 90%: Bob, in Moscow's day
    assert warned.resets_at == datetime(2026, 11, 27, 21, 0, tzinfo=UTC)  # Moscow's midnight
    assert await budget.warnings(ALICE.owner_id) == []
    # Alice spends 100 more in her own day: over, until her midnight, not Moscow's.
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO llm_calls (owner_id, purpose, model, input_tokens, output_tokens, at)"
            " VALUES (%s, 'reply', 'gpt-4o-mini', 1000, 0, %s)",
            (ALICE.owner_id, now - timedelta(hours=1)),
        )
    assert await budget.resets_at(ALICE.owner_id) == datetime(2026, 11, 28, 8, 0, tzinfo=UTC)
    # Back to TIMEZONE (/tz changed here): both calls are in Moscow's day again.
    await users.set_timezone(ALICE.owner_id, None)
    budget.forget_zone(ALICE.owner_id)
    assert (await budget.spent(ALICE.owner_id)).day.tokens == 1900
