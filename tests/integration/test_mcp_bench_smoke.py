"""A tiny run of the MCP bench: every case comes out. Timings are never asserted here;
`python -m bench mcp` reports them."""

from __future__ import annotations

import argparse

import pytest

from bench.mcp_tools import CASES, run

pytestmark = pytest.mark.slow


async def test_the_mcp_bench_reports_every_case() -> None:
    results = await run(argparse.Namespace(turns=3, warmup=1))
    assert set(results) == {*CASES, "MCP call alone", "MCP call's record"}
    assert all(median > 0 and p95 >= median for median, p95 in results.values())
