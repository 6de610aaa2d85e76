"""The recall bench: its dataset keeps its promises, and a quick run reports every method.

Recall figures are never asserted here (they are what the bench measures), only that
they come out, in range, for every method that is installed; a method whose package is
missing is skipped, alone, with the package named.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from bench import recall
from bench.recall_data import (
    KINDS,
    LANGUAGES,
    generate,
    problems,
    shared_keys,
    template_problems,
)
from src.graph.timestamps import STAMP

pytestmark = pytest.mark.slow

RATES = ("recall@1", "recall@5", "recall@10", "mrr", "own", "empty")


def test_full_dataset_keeps_its_promises() -> None:
    dataset = generate()
    assert len(dataset.conversations) >= 3
    assert {c.language for c in dataset.conversations} == set(LANGUAGES)
    assert len({c.owner for c in dataset.conversations}) == len(dataset.conversations)
    assert len(dataset.questions) >= 300
    assert {q.kind for q in dataset.questions} == set(KINDS)
    assert {q.language for q in dataset.questions} == set(LANGUAGES)
    for conv in dataset.conversations:
        numbers = [m.number for m in conv.messages]
        assert numbers == list(range(1, len(conv.messages) + 1))
        users = [m for m in conv.messages if m.role == "user"]
        assert len(users) >= 300
        # Stored as the product stores them: user turns stamped, replies plain.
        assert all(STAMP.match(m.content) for m in users)
        assert not any(STAMP.match(m.content) for m in conv.messages if m.role == "assistant")
        times = [m.created_at for m in conv.messages]
        assert times == sorted(times)
        assert times[-1] - times[0] > timedelta(weeks=8)
        assert conv.echoes
    # Every answer is a user turn of its conversation; lexical questions share a word
    # with it, paraphrases none (for every template and value, and as generated).
    assert template_problems() == []
    assert problems(dataset) == []
    # The user's own earlier questions repeat the words of the bench's questions.
    by_name = {c.name: c for c in dataset.conversations}
    echoed = [q for q in dataset.questions if q.echoes and q.kind == "lexical"]
    assert echoed
    for q in echoed:
        turns = {m.number: m.content for m in by_name[q.conversation].messages}
        assert all(shared_keys(q.text, turns[e], q.language) for e in q.echoes)
    assert generate() == dataset


def test_command_line_defaults() -> None:
    assert recall.config_from(recall.parse([]))["latency"] is True
    assert recall.config_from(recall.parse(["--quick"]))["latency"] is False
    assert recall.config_from(recall.parse(["--quick", "--latency"]))["latency"] is True
    assert recall.config_from(recall.parse(["--no-latency"]))["latency"] is False
    with pytest.raises(SystemExit):
        recall.config_from(recall.parse(["--methods", "lexical,grep"]))


def test_tgagent_bench_recall_parses() -> None:
    from src.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["bench", "recall", "--quick", "--methods", "lexical"])
    assert args.handler.__module__ == "bench.recall"
    assert args.quick and args.methods == ["lexical"]
    args = parser.parse_args(["bench", "--quick"])
    assert args.handler.__module__ == "bench.cli"


@pytest.fixture(scope="module")
async def quick_result(pg_dsn: str) -> dict[str, Any]:
    return await recall.run(dict(recall.QUICK, latency=False), dsn=pg_dsn)


@pytest.mark.parametrize("method", recall.METHODS)
async def test_quick_run_reports_the_method(quick_result: dict[str, Any], method: str) -> None:
    why = recall.missing(method)
    if why is not None:
        pytest.skip(f"{method}: {why}")
    assert quick_result["skipped"] == {
        m: r for m in recall.METHODS if (r := recall.missing(m)) is not None
    }
    assert quick_result["methods"][method]["product"] == (method != "bm25")
    scopes = quick_result["metrics"]
    assert {"all", "lang:ru", "lang:en"} <= set(scopes)
    for scope, by_method in scopes.items():
        figures = by_method[method]
        assert figures["n"] > 0, scope
        for rate in RATES:
            assert 0.0 <= figures[rate] <= 1.0, (scope, rate)
        assert figures["recall@1"] <= figures["recall@5"] <= figures["recall@10"]
        assert figures["mrr"] <= figures["recall@10"]
    questions = quick_result["questions"]
    assert len(questions) == scopes["all"][method]["n"]
    assert all(method in q["rank"] for q in questions)
    assert "Recall of history search" in recall.render(quick_result)


async def test_latency_part_runs_small(pg_dsn: str) -> None:
    cfg = dict(recall.QUICK, latency=True, owners=2, per_owner=600, queries=5)
    result = await recall.run(cfg, dsn=pg_dsn, methods=["lexical", "fused"])
    latency = result["latency"]
    assert latency["messages"] == 2 * 600
    assert latency["vectors"] == 2 * 600  # every message is searchable and gets a vector
    assert latency["queries"] == 5
    for name in ("lexical", "fused", "embed", "ready"):
        figures = latency[name]
        assert 0 < figures["p50_ms"] <= figures["p95_ms"] <= figures["max_ms"], name
    assert "Latency of the product's search" in recall.render(result)
