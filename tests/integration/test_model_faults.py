"""Model faults: every one gets the user a clear answer, loses nothing, and the next
turn works. The tests run with LLM_MAX_RETRIES=0 so one injected fault is one failure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from src.services.agent_service import Identity
from src.services.factory import build_runtime
from src.services.llm_service import make_chat_model
from tests.conftest import make_settings

CAROL = Identity(555, "carol", "Carol", "en")

FAULTS: dict[str, Callable[[Any], None]] = {
    "http 500": lambda llm: llm.fail_next(1, status=500),
    "http 429": lambda llm: llm.fail_next(1, status=429),
    "malformed json": lambda llm: llm.malformed_next(1),
    "empty content": lambda llm: llm.empty_next(1),
    "no choices": lambda llm: llm.empty_next(1, mode="choices"),
    "dropped connection": lambda llm: llm.close_connection_next(1),
    "timeout": lambda llm: llm.delay_next(1, 3.0),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_fault_then_recovery(runtime_factory: Any, llm: Any, fault: str) -> None:
    rt = await runtime_factory(llm_timeout=1.0)
    FAULTS[fault](llm)
    failed = await rt.service.handle_message(CAROL, f"first ({fault})")
    assert not failed.ok and failed.stored and "saved" in failed.reply
    llm.script("recovered")
    result = await rt.service.handle_message(CAROL, "second")
    assert result.ok and result.reply == "recovered"
    conv = await rt.deps.conversations.get_or_create_conversation(CAROL.owner_id)
    rows = await rt.deps.conversations.load_last_messages(conv)
    assert [r["role"] for r in rows] == ["user", "user", "assistant"]
    assert rows[0]["content"].endswith(f"first ({fault})")


async def test_connection_refused(pool: Any, llm: Any) -> None:
    settings = make_settings(llm)
    dead = make_chat_model(settings.model_copy(update={"openai_base_url": "http://127.0.0.1:1/v1"}))
    rt = await build_runtime(settings, pool=pool, chat_model=dead)
    try:
        result = await rt.service.handle_message(CAROL, "anyone there?")
        assert not result.ok and result.stored
    finally:
        await rt.close()


async def test_tool_call_with_invalid_arguments(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.script(
        {"tool_calls": [{"name": "search_history", "args": {"query": ["not", "a", "string"]}}]},
        "done",
    )
    result = await rt.service.handle_message(CAROL, "search weirdly")
    assert result.ok and result.reply == "done"
    tool = [m for m in llm.last_request()["messages"] if m["role"] == "tool"][0]
    assert "rror" in tool["content"]
