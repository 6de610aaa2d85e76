"""A tiny run of the budget bench: both cases come out. Timings are never asserted here;
`python -m bench budget` reports them."""

from __future__ import annotations

import argparse

import pytest

from bench.budget import run

pytestmark = pytest.mark.slow


async def test_the_budget_bench_reports_both_cases() -> None:
    results = await run(argparse.Namespace(calls=30, rows=100, repeat=3))
    assert set(results) == {"private", "group"}
    assert all(median > 0 and p95 >= median for median, p95 in results.values())
