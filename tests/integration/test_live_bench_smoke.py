"""A tiny run of the live-replies bench: every run answered, stamps in causal order, calls
counted where they must be.

Timings are never asserted here; `tgagent bench live` reports them.
"""

from __future__ import annotations

import json

import pytest

from bench.live import render, run

pytestmark = pytest.mark.slow


async def test_tiny_live_bench_reports_every_figure_in_a_sane_order(pg_dsn: str) -> None:
    result = await run(turns=2, chats=1, ttft=0.1, words=20, pace=0.1, dsn=pg_dsn, compare_turns=1)
    runs = result["runs"]
    assert [(r["kind"], r["stream"]) for r in runs] == [
        ("private", True),
        ("group", True),
        ("private", False),
        ("group", False),
    ]
    assert [r["turns"] for r in runs] == [2, 1, 1, 1]
    for r in runs:
        assert r["replies"] == r["turns"] and r["lost"] == 0, r["kind"]
        for turn in r["turn_stamps"]:
            # What the user sees comes after the model wrote it, which comes after the ask.
            assert turn["pushed"] <= turn["model_arrived"] <= turn["model_first"]
            assert turn["model_first"] <= turn["first_visible"] <= turn["final"]
        for key in ("request", "first_token", "first_visible", "visible_after_token", "whole"):
            assert r["ms"][key]["n"] == r["replies"], key
        assert r["ms"]["first_visible"]["p50"] >= r["ms"]["first_token"]["p50"]
        calls = r["calls_per_reply"]
        assert calls.get("sendMessage", 0) >= 1 and sum(calls.values()) > 0
        assert r["late_drafts"] == 0
    live_private, _, plain_private, plain_group = runs
    assert live_private["calls_per_reply"]["sendMessageDraft"] > 0
    for r in (plain_private, plain_group):
        assert "sendMessageDraft" not in r["calls_per_reply"]
        assert "editMessageText" not in r["calls_per_reply"]
    target = result["target"]
    assert target["measured_p95_ms"] == live_private["ms"]["visible_after_token"]["p95"]
    assert isinstance(target["met"], bool)
    text = render(json.loads(json.dumps(result)))
    assert "| first visible - first token, per turn |" in text
    assert "| private | off | 1/1 |" in text and "| group | on | 1/1 |" in text
