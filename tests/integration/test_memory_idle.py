"""Memory model calls wait for idle time and are bounded (src/graph/memory/idle.py), through
the real ChatOpenAI client against the fake OpenAI-compatible server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from src.graph.memory.idle import ReplyGate, gate_for, is_local, urgent
from src.graph.output_caps import with_output_cap
from src.services.llm_service import make_summary_model
from tests.conftest import make_settings
from tests.fakes.memory_model import MEMORY_MODEL


async def _until(condition: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_a_memory_call_waits_until_the_reply_is_made(llm: Any) -> None:
    gate = ReplyGate(enabled=True, quiet=0.05)
    model = make_summary_model(make_settings(llm), gate=gate)
    with gate.replying():
        call = asyncio.ensure_future(model.ainvoke([HumanMessage("fold this")]))
        await _until(lambda: gate.holds(None))
        assert llm.requests == []  # at the gate: nothing sent while the reply is made
    answer = await asyncio.wait_for(call, 30)
    assert answer.text and len(llm.requests_for(MEMORY_MODEL)) == 1


async def test_lines_typed_ahead_hold_memory_calls_too(llm: Any) -> None:
    gate = ReplyGate(enabled=True, quiet=0.0)
    model = make_summary_model(make_settings(llm), gate=gate)
    gate.expecting(True)
    call = asyncio.ensure_future(model.ainvoke([HumanMessage("fold this")]))
    await _until(lambda: gate.holds(None))
    assert llm.requests == []
    gate.expecting(False)
    await asyncio.wait_for(call, 30)
    assert len(llm.requests) == 1


async def test_the_turns_own_fold_does_not_wait(llm: Any) -> None:
    gate = ReplyGate(enabled=True, quiet=10.0)
    model = make_summary_model(make_settings(llm), gate=gate)
    with gate.replying(), urgent():
        answer = await asyncio.wait_for(model.ainvoke([HumanMessage("fold this")]), 30)
    assert answer.text and len(llm.requests) == 1


async def test_a_memory_call_is_bounded_in_time_and_output(llm: Any) -> None:
    settings = make_settings(
        llm,
        memory_waits_for_replies="auto",
        memory_call_seconds=0.5,
        memory_max_output_tokens=100,
    )
    gate = gate_for(settings)
    assert gate.enabled  # the fake is on this machine: a local server (auto)
    model = with_output_cap(make_summary_model(settings, gate=gate), 1500)
    llm.delay_next(1, 30.0)  # a server that takes half a minute before it writes
    with pytest.raises(TimeoutError):
        await model.ainvoke([HumanMessage("extract facts")])
    await model.ainvoke([HumanMessage("extract facts")])
    request = llm.requests[-1]
    cap = request.get("max_completion_tokens") or request.get("max_tokens")
    assert cap == 100  # MEMORY_MAX_OUTPUT_TOKENS


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8080/v1", True),
        ("http://localhost:11434/v1", True),
        ("http://192.168.1.20:8000/v1", True),
        ("http://ollama:11434/v1", True),
        ("https://api.openai.com/v1", False),
        ("https://openrouter.ai/api/v1", False),
        (None, False),
    ],
)
def test_which_endpoints_are_local(url: str | None, local: bool) -> None:
    assert is_local(url) is local
