"""A turn's tokens when the endpoint reports no usage (llama.cpp's servers in a stream):
an estimate, marked as such, never `0 in / 0 out`."""

from __future__ import annotations

from typing import Any

from src.services.agent_service import Identity, TurnStream

BEA = Identity(311, "bea", "Bea", "en")


async def test_a_streamed_turn_without_usage_is_estimated(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.reports_usage = False
    llm.script("A fine answer of several words.")
    stream = TurnStream(lambda piece: None, lambda names: None)
    result = await rt.service.handle_message(BEA, "hello, how are you?", stream=stream)
    assert result.reply == "A fine answer of several words."
    # Usage was asked for (and not given): the turn's count is an estimate, marked.
    assert llm.requests[0]["stream_options"] == {"include_usage": True}
    assert result.tokens_in > 100 and result.tokens_out > 0  # the tools' schemas, the text
    assert result.tokens_estimated
    await rt.service.drain()
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT input_tokens, output_tokens, estimated FROM llm_calls WHERE purpose = 'reply'"
        )
        calls = await cur.fetchall()
    assert [c["estimated"] for c in calls] == [True] and calls[0]["input_tokens"] > 0


async def test_reported_usage_is_taken_as_it_is(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.script("A fine answer.")
    stream = TurnStream(lambda piece: None, lambda names: None)
    result = await rt.service.handle_message(BEA, "hello", stream=stream)
    assert result.tokens_out == len("A fine answer.") // 4  # the fake's count
    assert not result.tokens_estimated
