"""A tiny run of the turn bench: every figure is produced and nothing is lost.

Timings are never asserted here; `tgagent bench` reports them (see README, Benchmarks).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.report import render
from bench.turns import run

pytestmark = pytest.mark.slow

TINY = {
    "turns": 6,
    "db_warm": 2,
    "db_turns": 2,
    "conversations": 3,
    "load_seconds": 0.5,
    "load_seeded": 4,
    "growth": [100, 300],
    "baseline_growth": [100, 200],
    "growth_turns": 2,
    "baseline_growth_turns": 2,
}
PHASES = {"long", "db", "load", "growth"}


def _check_subject(figures: dict[str, Any]) -> None:
    assert set(figures) == PHASES
    long = figures["long"]
    assert long["turns"] == TINY["turns"] and long["failed"] == 0
    assert set(long["overhead_ms"]) >= {"median", "p95", "p99"}
    assert set(long["at_turn"]) == {"6"}
    mark = long["at_turn"]["6"]
    assert mark["tokens_sent"] > 0 and mark["history_tokens"] > 0
    assert mark["checkpoint_bytes_per_turn"] > 0
    db = figures["db"]
    assert db["turns"] == TINY["db_turns"]
    assert db["per_turn"]["round_trips"] > 0 and db["per_turn"]["statements"] > 0
    assert db["per_turn"]["saver_calls"] > 0
    assert db["rows_written_per_turn"] > 0
    load = figures["load"]
    assert load["turns"] > 0
    assert load["lost_messages"] == 0 and load["failed_turns"] == 0
    assert load["turns_per_s"] > 0
    for size, grown in figures["growth"].items():
        assert int(size) > 0 and grown["failed"] == 0
        assert "median" in grown["overhead_ms"]


async def test_tiny_bench_run_produces_every_figure_and_loses_nothing(pg_dsn: str) -> None:
    result = await run(dict(TINY), "smoke", dsn=pg_dsn)
    assert set(result) == {"meta", "figures", "targets"}
    _check_subject(result["figures"]["ours"])
    _check_subject(result["figures"]["baseline"])
    assert set(result["figures"]["ours"]["growth"]) == {"100", "300"}
    # Our stack stores every message in its own table; the baseline in its checkpoints.
    assert result["figures"]["ours"]["db"]["stored_messages"] == 2 * (
        TINY["db_warm"] + TINY["db_turns"]
    )
    assert all({"target", "value", "met"} <= set(t) for t in result["targets"])
    text = render(json.loads(json.dumps(result)))
    for title in ("1) ", "2) ", "3) ", "4) ", "5) ", "6) ", "Targets"):
        assert title in text
