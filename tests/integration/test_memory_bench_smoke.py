"""A tiny run of the memory bench: every figure comes out and no message goes missing.

Timings are never asserted here; `python -m bench memory` reports them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import memory_audit
from bench.memory_load import run
from bench.memory_report import broken, render
from src.graph import prompts

pytestmark = pytest.mark.slow

TINY: dict[str, Any] = {
    "turns": 8,
    "memory_seconds": 0.05,
    "think": 0.02,
    "step": 3,
    "long_chars": 3_000,
    # A small window, so that the summary folds within a handful of turns.
    "settings": {"max_context": 6, "summary_trigger": 2},
}


def _chat(*texts: str) -> dict[str, object]:
    messages = [{"role": "system", "content": prompts.SYSTEM_PROMPT}]
    return {"messages": messages + [{"role": "user", "content": t} for t in texts]}


def _fold(*texts: str) -> dict[str, object]:
    lines = "\n".join(f"[user]: {t}" for t in texts)
    prompt = prompts.SUMMARY_PROMPT.format(
        instruction="Update the summary.", summary="(empty)", conversation=lines, words=50
    )
    return {
        "messages": [
            {"role": "system", "content": prompts.SUMMARIZER_SYSTEM},
            {"role": "user", "content": prompt},
        ]
    }


def test_the_audit_finds_a_missing_message_and_a_resent_call() -> None:
    from tests.memory_ledger import Ledger

    found = memory_audit.missing([_chat("u1 hi"), _chat("u2 and?")], Ledger())
    assert found["pairs"] == 1 and found["turns"] == [1]
    assert found["at"] == [{"turn": 2, "missing_turns": [1]}]
    calls = memory_audit.memory_calls([_fold("u1 a", "u2 b"), _fold("u2 b", "u3 c")])
    assert calls["by_kind"] == {"summary": 2}
    assert calls["resent_calls"] == 1 and calls["resent_turns"] == {"summary": [2]}


async def test_tiny_memory_bench_run_loses_nothing(pg_dsn: str) -> None:
    result = await run(dict(TINY), "smoke", dsn=pg_dsn)
    assert set(result) == {"meta", "figures"}
    figures = result["figures"]
    assert list(figures) == [
        "short, step 1",
        "short, step 3",
        "3,000 chars, step 1",
        "3,000 chars, step 3",
    ]
    for name, f in figures.items():
        assert f["failed_turns"] == [] and f["chat_requests"] == TINY["turns"], name
        assert f["missing"]["pairs"] == 0 and f["missing"]["messages"] == 0, f["missing"]
        memory = f["memory"]
        assert memory["received"] == memory["started"] > 0, memory
        assert memory["started"] == memory["answered"] + memory["cancelled"], memory
        assert memory["by_kind"].get("summary", 0) > 0, memory
        assert {"resent_calls", "resent_messages"} <= set(memory)
        prompt = f["prompt"]
        assert 0 <= prompt["prefix_share_mean"] <= 1 and prompt["tokens_mean"] > 0
        assert len(prompt["series"]["prefix_share"]) == TINY["turns"] - 1
        assert f["reply_ms"]["n"] == TINY["turns"]
    assert figures["3,000 chars, step 1"]["message_chars"] == 3_000
    assert not broken(result)
    text = render(json.loads(json.dumps(result)))
    assert "MISSING (request, message) pairs" in text and "prefix share, mean %" in text
