"""A tiny run of the memory-growth bench: its figures come out and the budget holds."""

from __future__ import annotations

from typing import Any

from bench import memory_growth as bench
from src.graph.context.budget import Layers
from src.graph.tokens import ApproxCounter
from tests.fakes import openai_server


async def test_memory_growth_bench_runs(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(
        llm_model=bench.CHAT,
        summary_model=bench.SUMMARY,
        compact_model=bench.COMPACT,
        max_context=6,
        summary_trigger=2,
        default_context_limit=2048,
    )
    llm.default_reply = bench.route
    result = await bench.play(rt, llm, openai_server, ApproxCounter(), 12)
    calls = result.pop("summarizer_calls")
    assert set(result) == {"10", "12"}
    total = Layers.for_model(rt.settings, bench.CHAT).total
    for row in result.values():
        assert 0 < row["sent"] == row["context_tokens"] <= total
        assert row["full_history"] > 0
    assert {c["kind"] for c in calls} == {"facts", "summary"}
    assert result["12"]["full_history"] > result["12"]["sent"]
