"""The graph's behaviour: seed 000's /forget window, tool loop cap, summarizer, concurrency."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from src.services.agent_service import Identity
from src.services.factory import build_runtime
from src.services.llm_service import make_chat_model
from tests.conftest import make_settings

BOB = Identity(202, "bob", "Bob", "en")


def _history(request: dict[str, Any]) -> list[str]:
    """Return the contents sent before the current message, the system prompt excluded."""
    return [m["content"] for m in request["messages"][1:-1]]


async def test_forget_then_three_exchanges(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    for text in ("before 1", "before 2"):
        await rt.service.handle_message(BOB, text)
    await rt.service.forget(BOB)
    user = await rt.deps.users.get(BOB.owner_id)
    assert user["active_messages_count"] == 0 and user["remind_of_yourself"] == "0"
    expected_counts = []
    for text in ("Привет", "Как дела?", "Отлично!"):
        await rt.service.handle_message(BOB, text)
        history = _history(llm.last_request())
        expected_counts.append(len(history))
        assert not any("before" in h for h in history)
        assert "before 1" not in llm.last_request()["messages"][0]["content"]
        assert "before 2" not in llm.last_request()["messages"][0]["content"]
        user = await rt.deps.users.get(BOB.owner_id)
        assert user["active_messages_count"] == 2 * len(expected_counts)
    assert expected_counts == [0, 2, 4]
    conv = await rt.deps.conversations.get_or_create_conversation(BOB.owner_id)
    assert await rt.deps.conversations.count_messages(conv) == 10  # history kept


async def test_new_wipes_conversation_and_checkpoints(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    await rt.service.handle_message(BOB, "remember me")
    old = await rt.deps.conversations.get_or_create_conversation(BOB.owner_id)
    assert await rt.checkpointer.aget_tuple({"configurable": {"thread_id": str(old)}})
    new = await rt.service.new_conversation(BOB)
    assert new != old
    assert await rt.checkpointer.aget_tuple({"configurable": {"thread_id": str(old)}}) is None
    await rt.service.handle_message(BOB, "who am I?")
    assert _history(llm.last_request()) == []


class ToolLoopModel(GenericFakeChatModel):
    """A fake model that always asks for a tool, and binds tools by ignoring them."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


async def test_tool_loop_cap_still_answers(pool: Any, llm: Any) -> None:
    def answers() -> Any:
        n = 0
        while True:
            n += 1
            call = {"name": "search_history", "args": {"query": f"q{n}"}, "id": f"c{n}"}
            yield AIMessage("", tool_calls=[call]) if n <= 50 else AIMessage("never")

    model = ToolLoopModel(messages=answers())
    rt = await build_runtime(
        make_settings(llm, max_tool_rounds=3), pool=pool, chat_model=model, summary_model=model
    )
    try:
        result = await rt.service.handle_message(BOB, "loop forever")
    finally:
        await rt.close()
    assert result.ok
    assert result.tools_used == ["search_history"]
    conv = await rt.deps.conversations.get_or_create_conversation(BOB.owner_id)
    rows = await rt.deps.conversations.load_last_messages(conv)
    assert sum(r["role"] == "tool" for r in rows) == 3
    assert rows[-2]["content"] == "Tools used: search_history"


async def test_unknown_tool_and_bad_arguments_are_tool_errors(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory()
    llm.script(
        {"tool_calls": [{"name": "rm_rf", "args": {}}, {"name": "search_history", "args": {}}]},
        "sorry",
    )
    result = await rt.service.handle_message(BOB, "do something odd")
    assert result.ok and result.reply == "sorry"
    tool_results = [m["content"] for m in llm.last_request()["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 2 and all("rror" in r for r in tool_results)


async def test_summary_enters_context_after_overflow(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(max_context=4, summary_trigger=2, summary_model="summ-model")
    llm.script_for("summ-model", *["SUMMARY: Bob likes tea."] * 10)
    for i in range(5):
        await rt.service.handle_message(BOB, f"turn {i}")
        await rt.service.drain()
    summary_requests = llm.requests_for("summ-model")
    assert len(summary_requests) >= 1
    first = summary_requests[0]["messages"][-1]["content"]
    assert "turn 0" in first and "turn 4" not in first
    await rt.service.handle_message(BOB, "what do I like?")
    system = llm.last_request()["messages"][0]["content"]
    assert system.count("SUMMARY: Bob likes tea.") == 1
    conv = await rt.deps.conversations.get_conversation(
        await rt.deps.conversations.get_or_create_conversation(BOB.owner_id)
    )
    assert conv["summary"] == "SUMMARY: Bob likes tea."
    rows = await rt.deps.conversations.load_last_messages(conv["id"], 100)
    assert rows[0]["summarized"] and not rows[-1]["summarized"]


async def test_summarizer_failure_loses_nothing(pool: Any, llm: Any) -> None:
    settings = make_settings(llm, max_context=2, summary_trigger=1)
    # The summarizer's endpoint refuses connections; the chat model works.
    dead = make_chat_model(settings.model_copy(update={"openai_base_url": "http://127.0.0.1:1/v1"}))
    rt = await build_runtime(settings, pool=pool, summary_model=dead)
    try:
        for i in range(4):
            result = await rt.service.handle_message(BOB, f"t{i}")
            assert result.ok
            await rt.service.drain()
        conv = await rt.deps.conversations.get_or_create_conversation(BOB.owner_id)
        assert await rt.deps.conversations.count_messages(conv) == 8
        assert (await rt.deps.conversations.get_conversation(conv))["summary"] == ""
    finally:
        await rt.close()


@pytest.mark.slow
async def test_concurrent_users_and_one_busy_conversation(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(summary_trigger=1000)
    llm.delay = 0.01
    owner = re.compile(r"u(\d+):")
    llm.concurrency_key = lambda req: owner.findall(req["messages"][-1]["content"])[-1]

    async def user_turns(uid: int) -> None:
        for i in range(10):
            result = await rt.service.handle_message(Identity(uid), f"u{uid}: message {i}")
            assert result.ok

    busy = Identity(999)
    await asyncio.gather(
        *(user_turns(1000 + u) for u in range(20)),
        *(rt.service.handle_message(busy, f"u999: burst {i}") for i in range(5)),
    )
    await rt.service.drain()
    assert llm.overlaps == 0
    for uid in [*range(1000, 1020), 999]:
        conv = await rt.deps.conversations.get_or_create_conversation(uid)
        rows = await rt.deps.conversations.load_last_messages(conv, limit=100)
        roles = [r["role"] for r in rows]
        assert roles == ["user", "assistant"] * (len(rows) // 2)
        assert [r["number"] for r in rows] == list(range(1, len(rows) + 1))
        if uid != 999:
            texts = [r["content"].split("] ", 1)[1] for r in rows if r["role"] == "user"]
            assert texts == [f"u{uid}: message {i}" for i in range(10)]
        else:
            assert len(rows) == 10
