"""A compact is made from its session's own messages (issue 40).

Before: the compactor was given the conversation's whole running summary, which covers
everything before a `/memory clear` or a compact's 🗑 and every earlier session of the
conversation; and a session whose messages the summary had all folded (fold-ahead, then a
turn of tool calls) got no compact at all.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from src.graph import prompts
from src.graph.timestamps import strip_stamp
from src.services.agent_service import Identity
from tests.fakes.memory_model import MEMORY_MODEL, memory_reply
from tests.fakes.openai_server import message_text

ZED = Identity(7401, "zed", "Zed", "en")
SECRET = "ZEBRA42"
BEFORE = ("my secret code is ZEBRA42", "let's talk about tea", "green or black tea?")
AFTER = tuple(f"line {i} about the weather in Oslo" for i in range(5))


def call(name: str, **args: Any) -> dict[str, Any]:
    """A scripted model answer asking for one tool."""
    return {"tool_calls": [{"name": name, "args": args}]}


async def chat(rt: Any, *texts: str) -> None:
    for text in texts:
        assert (await rt.service.handle_message(ZED, text)).ok
    await rt.service.drain()


def compact_prompts(requests: list[dict[str, Any]]) -> list[str]:
    """The compact model's prompts among `requests`."""
    return [
        message_text(r["messages"][-1])
        for r in requests
        if r.get("model") == MEMORY_MODEL
        and message_text(r["messages"][0]) == prompts.COMPACT_SYSTEM
    ]


async def summary_of(rt: Any, conversation_id: uuid.UUID) -> str:
    return str((await rt.deps.conversations.get_conversation(conversation_id))["summary"])


async def compacts(rt: Any) -> list[dict[str, Any]]:
    return list(await rt.deps.memory.list_compacts(ZED.owner_id, 10))


async def test_memory_clear_stays_out_of_the_next_compact(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(max_context=8, summary_trigger=2)
    await chat(rt, *BEFORE)
    await rt.service.clear_memory(ZED)
    await chat(rt, *AFTER)
    conversation = await rt.deps.conversations.get_or_create_conversation(ZED.owner_id)
    assert SECRET in await summary_of(rt, conversation)  # the running summary holds it
    seen = len(llm.requests)

    await rt.service.new_conversation(ZED)
    await rt.service.drain()
    await chat(rt, "what did we talk about before?")

    later = llm.requests[seen:]
    (prompt,) = compact_prompts(later)
    assert "line 4 about the weather in Oslo" in prompt and "tea" not in prompt
    for request in later:
        assert SECRET not in json.dumps(request, ensure_ascii=False), request["messages"][0]
    (row,) = await compacts(rt)
    assert "weather" in row["summary"] and SECRET not in json.dumps(row, default=str)


async def test_a_deleted_compact_stays_out_of_the_next_one(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(max_context=8, summary_trigger=2, session_idle_minutes=30)
    await chat(rt, BEFORE[0])  # not folded yet: the summary folds it in the next session
    assert await rt.service.compact_idle_sessions(datetime.now(UTC) + timedelta(minutes=31)) == 1
    (first,) = await compacts(rt)
    assert SECRET in first["summary"]
    assert await rt.service.forget_compact(ZED, first["id"])  # its 🗑 button
    await chat(rt, *AFTER)
    conversation = await rt.deps.conversations.get_or_create_conversation(ZED.owner_id)
    assert SECRET in await summary_of(rt, conversation)
    seen = len(llm.requests)

    assert await rt.service.compact_idle_sessions(datetime.now(UTC) + timedelta(minutes=95)) == 1
    (prompt,) = compact_prompts(llm.requests[seen:])
    assert "line 0 about the weather in Oslo" in prompt and SECRET not in prompt
    (second,) = await compacts(rt)
    assert "weather" in second["summary"] and SECRET not in json.dumps(second, default=str)


async def test_a_second_session_compact_does_not_repeat_the_first(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory(max_context=8, summary_trigger=2, session_idle_minutes=30)
    await chat(
        rt, "let's plan the trip to Tbilisi", "flights on Friday", "a hotel near the old town"
    )
    assert await rt.service.compact_idle_sessions(datetime.now(UTC) + timedelta(minutes=31)) == 1
    await chat(rt, *AFTER)
    conversation = await rt.deps.conversations.get_or_create_conversation(ZED.owner_id)
    assert "Tbilisi" in await summary_of(rt, conversation)
    seen = len(llm.requests)

    assert await rt.service.compact_idle_sessions(datetime.now(UTC) + timedelta(minutes=95)) == 1
    (prompt,) = compact_prompts(llm.requests[seen:])
    # The whole second session, its first (folded) line included, and nothing of the first.
    for line in AFTER:
        assert line in prompt
    assert "Tbilisi" not in prompt and "hotel" not in prompt
    second, first = await compacts(rt)
    assert "Tbilisi" in first["summary"]
    assert "weather" in second["summary"] and "Tbilisi" not in second["summary"]


@pytest.mark.parametrize("end", ["new", "idle"])
async def test_a_session_ending_with_tool_calls_gets_a_compact(
    runtime_factory: Any, llm: Any, end: str
) -> None:
    rt = await runtime_factory(session_idle_minutes=30)
    await chat(rt, *(f"plain question number {i}" for i in range(14)))
    llm.script(*(call("view_thread") for _ in range(5)), "Here is the thread.")
    result = await rt.service.handle_message(ZED, "show me our thread")
    assert result.ok and result.tools_used == ["view_thread"]
    await rt.service.drain()
    seen = len(llm.requests)

    if end == "new":
        await rt.service.new_conversation(ZED)
        await rt.service.drain()
    else:
        later = datetime.now(UTC) + timedelta(minutes=31)
        assert await rt.service.compact_idle_sessions(later) == 1

    (prompt,) = compact_prompts(llm.requests[seen:])
    assert "plain question number 0" in prompt and "show me our thread" in prompt
    (row,) = await compacts(rt)
    assert "plain question number 13" in row["summary"]


async def test_a_long_session_is_compacted_in_parts_oldest_first(
    runtime_factory: Any, llm: Any
) -> None:
    # The compact model reads about 280 tokens a call: the session takes several.
    rt = await runtime_factory(
        compact_model="compact-model", model_context_limits={"compact-model": 1500}
    )
    llm.default_for("compact-model", memory_reply)
    await chat(rt, *(f"plain question number {i}" for i in range(14)))
    await rt.service.new_conversation(ZED)
    await rt.service.drain()

    asked = [message_text(r["messages"][-1]) for r in llm.requests_for("compact-model")]
    assert len(asked) > 1
    assert "plain question number 0" in asked[0] and "Summary of the earlier part" not in asked[0]
    # Every user message read once, in order.
    said = [line for p in asked for line in p.splitlines() if line.startswith("[user]: ")]
    assert [strip_stamp(line.removeprefix("[user]: ")) for line in said] == [
        f"plain question number {i}" for i in range(14)
    ]
    for before, prompt in zip(asked, asked[1:], strict=False):
        earlier = json.loads(
            memory_reply(
                {
                    "messages": [
                        {"role": "system", "content": prompts.COMPACT_SYSTEM},
                        {"role": "user", "content": before},
                    ]
                }
            )
        )["summary"]
        assert f"Summary of the earlier part:\n{earlier}\n\nMessages:\n" in prompt
    (row,) = await compacts(rt)
    assert "plain question number 13" in row["summary"]
