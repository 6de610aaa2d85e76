"""Every model call carries an output cap the server honours (issue #16).

The fake server here acts like llama.cpp's server: it ignores `max_completion_tokens`,
so a call capped only by that field would run to the end of the scripted reply.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from src.graph import prompts
from src.graph.memory.facts import extract_batch, read_pending
from src.graph.memory.summarizer import (
    SHORTER_TRIES,
    SummaryTooLong,
    summary_limits,
    update_summary,
)
from src.graph.output_caps import (
    COMPACT_TOKENS,
    FACTS_TOKENS,
    REMINDER_TOKENS,
    summary_tokens,
)
from src.services.agent_service import Identity
from src.services.reminders import ReminderService
from tests.fakes.memory_model import MEMORY_MODEL

ANN = Identity(7301, "ann", "Ann", "ru")
CHAT = "gpt-4o-mini"
# 9,000 characters: far past every cap (the fake counts 4 characters a token).
LONG = "".join(f"слово{i:04d}. " for i in range(750))


@pytest.fixture
def llama(llm: Any) -> Any:
    """Return the fake model server acting like llama.cpp's server."""
    llm.honours_max_completion_tokens = False
    return llm


def memory_requests(llm: Any, system: str) -> list[dict[str, Any]]:
    return [r for r in llm.requests_for(MEMORY_MODEL) if r["messages"][0]["content"] == system]


async def test_cut_reply_is_capped_delivered_and_logged(
    runtime_factory: Any, llama: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rt = await runtime_factory(llm_max_output_tokens=64)
    llama.script(LONG)
    with caplog.at_level(logging.INFO):
        result = await rt.service.handle_message(ANN, "Расскажи всё, что знаешь")
    request = llama.requests_for(CHAT)[-1]
    assert request["max_tokens"] == 64 and "max_completion_tokens" not in request
    assert result.ok and 0 < len(result.reply) <= 64 * 4 and LONG.startswith(result.reply)
    conv = await rt.deps.conversations.get_or_create_conversation(ANN.owner_id)
    stored = (await rt.deps.conversations.load_last_messages(conv))[-1]
    assert stored["role"] == "assistant" and stored["content"] == result.reply
    cut = [r for r in caplog.records if "cut at the output cap" in r.getMessage()]
    assert len(cut) == 1 and str(ANN.owner_id) in cut[0].getMessage()


async def test_whole_reply_is_not_marked_cut(
    runtime_factory: Any, llama: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rt = await runtime_factory(llm_max_output_tokens=64)
    llama.script("Коротко: всё хорошо.")
    with caplog.at_level(logging.INFO):
        result = await rt.service.handle_message(ANN, "Как дела?")
    assert result.reply == "Коротко: всё хорошо."
    assert not [r for r in caplog.records if "cut at the output cap" in r.getMessage()]


async def test_max_completion_tokens_when_asked(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(
        llm_max_output_tokens=64, llm_token_limit_param="max_completion_tokens"
    )
    llm.script(LONG)
    result = await rt.service.handle_message(ANN, "Расскажи всё")
    request = llm.requests_for(CHAT)[-1]
    assert request["max_completion_tokens"] == 64 and "max_tokens" not in request
    assert result.ok and len(result.reply) <= 64 * 4


async def test_summary_call_capped(runtime_factory: Any, llama: Any) -> None:
    rt = await runtime_factory(default_context_limit=4000)
    llama.script_for(MEMORY_MODEL, *[LONG] * (1 + SHORTER_TRIES))
    # Cut at the cap: asked again, shorter; cut every time: never stored cut.
    with pytest.raises(SummaryTooLong):
        await update_summary(rt.deps, "", "[user]: Привет\n[assistant]: Здравствуйте")
    requests = memory_requests(llama, prompts.SUMMARIZER_SYSTEM)
    assert len(requests) == 1 + SHORTER_TRIES
    budget = summary_limits(rt.settings).summary
    for request in requests:
        assert request["max_tokens"] == summary_tokens(budget)
        assert "max_completion_tokens" not in request


async def test_facts_call_capped(runtime_factory: Any, llama: Any) -> None:
    rt = await runtime_factory()
    assert (await rt.service.handle_message(ANN, "My dog is Rex.")).ok
    await rt.service.drain()
    conv = await rt.deps.conversations.get_or_create_conversation(ANN.owner_id)
    (batch,) = await read_pending(rt.deps, ANN.owner_id, conv)
    await extract_batch(rt.deps, batch)
    (request,) = memory_requests(llama, prompts.FACTS_SYSTEM)
    assert request["max_tokens"] == FACTS_TOKENS and "max_completion_tokens" not in request


async def test_compact_call_capped(runtime_factory: Any, llama: Any) -> None:
    rt = await runtime_factory()
    assert (await rt.service.handle_message(ANN, "Планирую поездку в Грузию")).ok
    await rt.service.new_conversation(ANN)
    await rt.service.drain()
    (request,) = memory_requests(llama, prompts.COMPACT_SYSTEM)
    assert request["max_tokens"] == COMPACT_TOKENS and "max_completion_tokens" not in request
    (row,) = await rt.deps.memory.list_compacts(ANN.owner_id)
    assert "Грузи" in row["summary"]


async def test_reminder_call_capped(runtime_factory: Any, llama: Any) -> None:
    rt = await runtime_factory()
    assert (await rt.service.handle_message(ANN, "Напомни мне про спорт")).ok
    user = await rt.deps.users.get(ANN.owner_id)
    conv = await rt.deps.conversations.get_or_create_conversation(ANN.owner_id)
    reminders = ReminderService(rt.deps)
    llama.script("Как успехи со спортом?", LONG)
    assert await reminders.compose(user, conv) == ("Как успехи со спортом?", True)
    request = llama.requests_for(CHAT)[-1]
    assert request["max_tokens"] == REMINDER_TOKENS and "max_completion_tokens" not in request
    # A reminder cut at its cap is not sent: the template is.
    text, from_model = await reminders.compose(user, conv)
    assert not from_model and text and not LONG.startswith(text)


@pytest.mark.parametrize("structured", ["auto", "off"])
async def test_cut_facts_answer_marks_the_batch(
    runtime_factory: Any, llama: Any, structured: str
) -> None:
    """A fact answer cut at its cap loses nothing: the batch is asked again in halves (the
    user's message alone here), and marked once that answer is whole."""
    rt = await runtime_factory(structured_output=structured)
    assert (await rt.service.handle_message(ANN, "My dog is Rex.")).ok
    await rt.service.drain()
    conv = await rt.deps.conversations.get_or_create_conversation(ANN.owner_id)
    (batch,) = await read_pending(rt.deps, ANN.owner_id, conv)
    llama.script_for(MEMORY_MODEL, '{"facts": [' + LONG)
    assert await extract_batch(rt.deps, batch) == 1
    assert await read_pending(rt.deps, ANN.owner_id, conv) == []


async def test_cut_compact_answer_stores_the_plain_text_compact(
    runtime_factory: Any, llama: Any
) -> None:
    rt = await runtime_factory()
    assert (await rt.service.handle_message(ANN, "Планирую поездку в Грузию")).ok
    llama.script_for(MEMORY_MODEL, '{"summary": "' + LONG)
    await rt.service.new_conversation(ANN)
    await rt.service.drain()
    (row,) = await rt.deps.memory.list_compacts(ANN.owner_id)
    assert "Планирую поездку в Грузию" in row["summary"] and "слово" not in row["summary"]
