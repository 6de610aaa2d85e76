"""Session ends: an idle one never delays the reply, and /new loses no facts to the model.

Before: the message that noticed an idle gap waited for the compact model (up to 10 s)
before its reply, and /new wiped the messages whose facts one failed extraction had not
stored.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from src.bot.jobs import retry_kept_facts
from src.bot.state import BOT_DATA_KEY, BotState
from src.graph import prompts
from src.graph.deps import utc_now
from src.services.agent_service import Identity
from src.services.pending_facts import PendingFacts
from tests.fakes.memory_model import MEMORY_MODEL, memory_reply
from tests.fakes.openai_server import Fault, message_text

NINA = Identity(7301, "nina", "Nina", "en")
COMPACT = "compact-model"
SESSION = ("Let's plan the trip to Tbilisi", "my city is Paris")


def system_of(request: dict[str, Any]) -> str:
    return message_text(request["messages"][0])


async def chat(rt: Any, *texts: str) -> None:
    for text in texts:
        assert (await rt.service.handle_message(NINA, text)).ok
    await rt.service.drain()


async def facts_of(rt: Any) -> dict[str, Any]:
    return {f["key"]: f for f in await rt.deps.memory.list_facts(NINA.owner_id)}


async def test_idle_session_end_never_delays_the_reply(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(session_idle_minutes=30)
    await chat(rt, *SESSION)
    conversation = await rt.deps.conversations.get_or_create_conversation(NINA.owner_id)

    async def slow(body: dict[str, Any]) -> Any:
        await asyncio.sleep(3)
        return memory_reply(body)

    # The compact model is the summary model: both answer in 3 s from now on.
    llm.default_for(MEMORY_MODEL, slow)
    later = utc_now() + timedelta(minutes=45)
    rt.deps.clock = lambda: later
    seen = len(llm.requests)
    assert (await rt.service.handle_message(NINA, "Hi again")).ok
    await rt.service.drain()  # the model's compact and the session's facts, after the reply

    requests, times = llm.requests[seen:], llm.request_times[seen:]
    (turn,) = [i for i, r in enumerate(requests) if r["model"] == rt.settings.llm_model]
    memory = [i for i, r in enumerate(requests) if r["model"] == MEMORY_MODEL]
    kinds = {system_of(requests[i]) for i in memory}
    assert {prompts.COMPACT_SYSTEM, prompts.FACTS_SYSTEM} <= kinds
    # The reply was asked for and answered before any memory model answered, or was asked.
    answered = times[turn]["first_content"]
    assert answered is not None
    for i in memory:
        assert times[turn]["arrived"] < answered <= times[i]["arrived"], (times[turn], times[i])
    # This very turn's prompt has the ended session under "Previous conversations", as
    # the plain-text compact (the model's was not there yet).
    system = system_of(requests[turn])
    assert prompts.PREVIOUS_CONVERSATIONS_HEADER in system
    assert "User wrote: Let's plan the trip to Tbilisi | my city is Paris" in system
    # Then the model's compact replaced it, under the same key, and the facts came.
    (compact,) = await rt.deps.memory.list_compacts(NINA.owner_id)
    assert compact["conversation_id"] == conversation
    assert compact["summary"] == "Talked about: Let's plan the trip to Tbilisi; my city is Paris"
    assert (await facts_of(rt))["city"]["value"] == "Paris"
    ended = (await rt.deps.conversations.get_conversation(conversation))["ended_at"]
    assert ended == compact["created_at"]


async def test_slow_model_compact_is_not_written_back_after_memory_clear(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory(compact_model=COMPACT)
    rt.service.compactor.wait_seconds = 0.2
    await chat(rt, *SESSION)
    release = threading.Event()

    async def held(body: dict[str, Any]) -> Any:
        await asyncio.to_thread(release.wait, 30)
        return memory_reply(body)

    llm.default_for(COMPACT, held)
    await rt.service.new_conversation(NINA)
    assert llm.requests_for(COMPACT) and not release.is_set()
    (plain,) = await rt.deps.memory.list_compacts(NINA.owner_id)
    assert plain["summary"].startswith("User wrote: ")
    await rt.service.clear_memory(NINA)
    release.set()
    await rt.service.drain()
    assert await rt.deps.memory.list_compacts(NINA.owner_id) == []


async def test_new_keeps_the_facts_the_model_failed_to_extract(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory(compact_model=COMPACT)
    await chat(rt, *SESSION)
    old = await rt.deps.conversations.get_or_create_conversation(NINA.owner_id)
    # /new's try and the job's first retry fail; then the model is back.
    llm.script_for(MEMORY_MODEL, Fault(500), Fault(500))
    await rt.service.new_conversation(NINA)
    await rt.service.drain()
    assert await facts_of(rt) == {}
    kept = PendingFacts(rt.deps)
    (row,) = await kept.repo.of_owner(NINA.owner_id)
    assert "my city is Paris" in row["text"] and row["source_conversation_id"] == old
    assert row["attempts"] == 1
    # The conversation is gone; its messages were marked when their text was kept.
    assert await rt.deps.conversations.get_conversation(old) is None

    asked = len(llm.requests_for(MEMORY_MODEL))
    assert await kept.retry_due() == 0  # within the back-off: not tried
    assert len(llm.requests_for(MEMORY_MODEL)) == asked
    now = utc_now() + timedelta(hours=1)
    assert await kept.retry_due(now) == 0  # tried, failed: the back-off doubles
    (row,) = await kept.repo.of_owner(NINA.owner_id)
    assert row["attempts"] == 2 and row["next_attempt_at"] == now + timedelta(seconds=600)
    assert await kept.retry_due(now + timedelta(seconds=599)) == 0
    assert len(llm.requests_for(MEMORY_MODEL)) == asked + 1

    # The bot's session-end job, whose clock says the back-off is over.
    rt.deps.clock = lambda: now + timedelta(seconds=600)
    state = BotState.from_settings(rt.settings, rt)
    assert await retry_kept_facts(SimpleNamespace(bot_data={BOT_DATA_KEY: state})) == 1
    facts = await facts_of(rt)
    assert facts["city"]["value"] == "Paris" and facts["city"]["source_conversation_id"] == old
    assert await kept.repo.of_owner(NINA.owner_id) == []


async def test_a_refused_kept_text_is_dropped_with_one_warning(
    runtime_factory: Any, llm: Any, caplog: Any
) -> None:
    rt = await runtime_factory(compact_model=COMPACT)
    await chat(rt, *SESSION)
    llm.script_for(MEMORY_MODEL, Fault(503), Fault(422))
    await rt.service.new_conversation(NINA)
    await rt.service.drain()
    kept = PendingFacts(rt.deps)
    assert len(await kept.repo.of_owner(NINA.owner_id)) == 1
    caplog.clear()
    caplog.set_level(logging.INFO)
    assert await kept.retry_due(utc_now() + timedelta(hours=1)) == 0
    assert await kept.repo.of_owner(NINA.owner_id) == []
    assert await facts_of(rt) == {}
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "refused" in warnings[0].getMessage(), warnings
    assert not any("Paris" in r.getMessage() for r in caplog.records)


async def test_a_kept_text_never_replaces_a_fact_learned_after_it(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory(compact_model=COMPACT, facts_every=1)
    await chat(rt, "Let's plan the trip")  # extracted at once (FACTS_EVERY=1)
    llm.script_for(MEMORY_MODEL, Fault(500), Fault(500))  # the reply's extraction, /new's
    await chat(rt, "my city is Paris, my dog is Rex")
    await rt.service.new_conversation(NINA)
    await rt.service.drain()
    kept = PendingFacts(rt.deps)
    assert len(await kept.repo.of_owner(NINA.owner_id)) == 1
    await chat(rt, "my city is Rome")  # the new conversation's fact, learned after
    assert (await facts_of(rt))["city"]["value"] == "Rome"
    assert await kept.retry_due(utc_now() + timedelta(hours=1)) == 1
    facts = await facts_of(rt)
    assert facts["city"]["value"] == "Rome" and facts["dog"]["value"] == "Rex"


async def test_memory_clear_deletes_kept_texts_and_their_work_in_flight(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory(compact_model=COMPACT)
    await chat(rt, *SESSION)
    llm.script_for(MEMORY_MODEL, Fault(500))
    await rt.service.new_conversation(NINA)
    await rt.service.drain()
    kept = PendingFacts(rt.deps)
    assert len(await kept.repo.of_owner(NINA.owner_id)) == 1
    release = threading.Event()

    async def held(body: dict[str, Any]) -> Any:
        await asyncio.to_thread(release.wait, 30)
        return memory_reply(body)

    llm.default_for(MEMORY_MODEL, held)
    asked = len(llm.requests_for(MEMORY_MODEL))
    retry = asyncio.create_task(kept.retry_due(utc_now() + timedelta(hours=1)))
    for _ in range(100):
        if len(llm.requests_for(MEMORY_MODEL)) > asked:
            break
        await asyncio.sleep(0.05)
    await rt.service.clear_memory(NINA)
    release.set()
    assert await retry == 0
    assert await facts_of(rt) == {}
    assert await kept.repo.of_owner(NINA.owner_id) == []
