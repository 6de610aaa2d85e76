"""A tiny run of the delivery bench: 1 and 2 working processes, and the queue's cost.

Timings are never asserted here; `tgagent bench delivery` reports them.
"""

from __future__ import annotations

import json

import pytest

from bench.delivery import render, run

pytestmark = pytest.mark.slow


async def test_tiny_delivery_bench_reports_every_figure_and_loses_nothing(pg_dsn: str) -> None:
    result = await run(2, 2, (1, 2), dsn=pg_dsn)
    assert [r["processes"] for r in result["throughput"]] == [1, 2]
    for r in result["throughput"]:
        assert r["turns"] == 4 and r["replies"] == 4 and r["lost"] == 0
        assert r["turns_per_s"] > 0 and r["seconds"] > 0
    cost = result["queue_cost"]
    assert cost["replies"] == 4 and cost["lost"] == 0
    assert cost["queue"]["round_trips_per_turn"] > 0 and cost["queue"]["ms_per_turn"] > 0
    assert cost["turn"]["round_trips_per_turn"] >= cost["queue"]["round_trips_per_turn"]
    assert cost["turn"]["job_ms"] > 0
    # Every update went through the inbox, its job and the outbox.
    # (finish_job runs after the reply is sent: the last ones may end after the count.)
    for name in ("store_updates", "inbox_row", "add_reply", "close", "fetch_job"):
        assert cost["methods"][name]["calls_per_turn"] > 0, name
    text = render(json.loads(json.dumps(result)))
    assert "| 2 (`tgagent bot` + 1 `tgagent worker`) | 4 | 4 |" in text
    assert "inbox/queue/outbox path" in text
