"""A tiny run of the memory-growth bench: its figures come out and the limits hold."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import memory_growth as bench
from src.graph import prompts
from src.graph.context.budget import Layers
from src.graph.memory.facts import parse_facts
from src.graph.tokens import ApproxCounter
from tests.fakes import openai_server

pytestmark = pytest.mark.slow

MAX_FACTS = 6


def test_fake_model_answers_the_facts_prompt() -> None:
    lines = [f"[user]: {bench.user_text(t)}" for t in range(20, 24)]
    lines.insert(1, "[assistant]: Запомни: мой проект 00999 — код 00001.")
    prompt = prompts.FACTS_EXTRACT.format(known="(none yet)", conversation="\n".join(lines))
    request = {
        "model": bench.SUMMARY,
        "messages": [
            {"role": "system", "content": prompts.FACTS_SYSTEM},
            {"role": "user", "content": prompt},
        ],
    }
    answer = json.loads(bench.route(request))
    assert set(answer) == {"facts"}
    keys = {f["key"] for f in parse_facts(json.dumps(answer))}
    # Turns 20 and 22 state new facts, turn 23 a core one; the assistant's line is no fact.
    assert keys == {"recipe_00010", "route_00011", "city"}
    assert bench.stated_keys(24) == 12 + 1


async def test_memory_growth_bench_runs(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(
        llm_model=bench.CHAT,
        summary_model=bench.SUMMARY,
        compact_model=bench.COMPACT,
        max_context=6,
        summary_trigger=2,
        default_context_limit=2048,
        facts_every=2,
        max_facts=MAX_FACTS,
        checkpoint_keep=5,
    )
    llm.default_reply = bench.route
    result = await bench.play(
        rt,
        llm,
        openai_server,
        ApproxCounter(),
        40,
        checkpoints=(10,),
        window=10,
        window_marks=(10, 30),
        facts_at=(20,),
        prune_every=20,
    )
    rows = result["turns"]
    assert set(rows) == {"10", "40"}
    total = Layers.for_model(rt.settings, bench.CHAT).total
    for row in rows.values():
        assert 0 < row["sent"] == row["context_tokens"] <= total
        assert row["full_history"] > 0
        assert row["facts"] <= MAX_FACTS
    assert rows["40"]["full_history"] > rows["40"]["sent"]
    assert rows["40"]["fact_calls"] > 0 and rows["40"]["summary_calls"] > 0

    # The marked windows and the last one, each with both memory models at work.
    assert [w["turns"] for w in result["memory_input"]] == ["1-10", "21-30", "31-40"]
    assert len(result["windows"]) == 4
    for w in result["memory_input"]:
        assert w["facts_calls"] > 0 and w["facts_tokens"] > 0
        assert w["summary_calls"] > 0 and w["summary_tokens"] > 0
        assert w["facts_tokens_per_turn"] == round(w["facts_tokens"] / 10, 1)
        assert 0 <= w["known_keys_max"] <= MAX_FACTS
    assert result["memory_calls"]["facts"]["calls"] == sum(
        w["facts_calls"] for w in result["windows"]
    )
    assert "compact" not in result["memory_calls"]  # no session ended

    # The user stated more distinct facts than MAX_FACTS: the cap is reached, not passed.
    assert result["stated_fact_keys"] > MAX_FACTS
    assert result["facts_per_user"] == {"20": MAX_FACTS, "40": MAX_FACTS}
    stored = await rt.deps.memory.list_facts(bench.USER.owner_id, 1000)
    assert "city" in {f["key"] for f in stored}  # the important one stays
    assert not llm.requests  # the bench keeps no request bodies between turns
    conversation = await rt.deps.conversations.get_or_create_conversation(bench.USER.owner_id)
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = ''"
            " AND metadata ->> 'source' = 'input'",
            (str(conversation),),
        )
        assert (await cur.fetchone())["n"] == 5  # pruned to CHECKPOINT_KEEP turns at turn 40

    bench.report({**_header(rt), **result})


def _header(rt: Any) -> dict[str, Any]:
    s = rt.settings
    return {
        "benchmark": "memory growth (smoke)",
        "database": "test",
        "counter": "approximate",
        "settings": {
            "context_limit": s.default_context_limit,
            "max_context": s.max_context,
            "summary_trigger": s.summary_trigger,
            "summary_strategy": s.summary_strategy,
            "llm_max_output_tokens": s.llm_max_output_tokens,
            "facts_every": s.facts_every,
            "max_facts": s.max_facts,
        },
    }
