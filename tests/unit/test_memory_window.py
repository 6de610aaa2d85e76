"""The window rule (src/graph/memory/window.py): what a request carries, what a fold takes."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from src.graph.memory.window import LAG_FACTOR, WindowRule, carried, due, in_window


def rows(n: int, summarized_below: int = 0) -> list[dict[str, Any]]:
    return [{"id": i, "number": i, "summarized": i < summarized_below} for i in range(1, n + 1)]


def one_token(_: dict[str, Any]) -> int:
    return 1


def test_the_window_is_the_last_size_messages() -> None:
    rule = WindowRule(size=30, working=10_000)
    assert [r["number"] for r in in_window(rows(50), rule)] == list(range(21, 51))
    assert len(in_window(rows(10), rule)) == 10
    assert in_window(rows(10), WindowRule(size=0, working=10_000)) == []


def test_a_step_keeps_the_start_for_step_over_two_turns() -> None:
    rule = WindowRule(size=12, working=10_000, step=4)
    starts = [in_window(rows(n), rule)[0]["number"] for n in range(20, 32, 2)]
    assert starts == [12, 12, 16, 16, 20, 20]
    assert all(9 <= len(in_window(rows(n), rule)) <= 12 for n in range(12, 60))


def test_lagging_messages_are_carried_up_to_the_cap() -> None:
    rule = WindowRule(size=4, working=10_000)
    history, lagging, hidden = carried(rows(10, summarized_below=3), rule)
    assert [r["number"] for r in history] == list(range(3, 11))
    assert (lagging, hidden) == (4, 0)
    history, lagging, hidden = carried(rows(40), rule)
    assert lagging == 4 * LAG_FACTOR and hidden == 36 - lagging


def test_a_fold_waits_for_a_batch_and_goes_at_the_edge() -> None:
    # MAX_CONTEXT 30, SUMMARY_TRIGGER 10: keep the newest 10 unfolded, fold 10 at a time.
    rule = WindowRule(size=30, working=10_000, trigger=10)
    assert (rule.batch, rule.keep) == (10, 10)
    assert due(rows(19), rule, one_token) == []  # 9 foldable: not yet
    assert [r["number"] for r in due(rows(20), rule, one_token)] == list(range(1, 11))
    # Everything older than the newest 10 was summarized but 2, which are about to leave.
    assert [r["number"] for r in due(rows(40, summarized_below=37), rule, one_token)] == []
    leaving = rows(40, summarized_below=40)
    leaving[11]["summarized"] = False  # 29th newest: the next exchange pushes it out
    assert [r["number"] for r in due(leaving, rule, one_token)] == [12]


def test_long_messages_fold_by_tokens() -> None:
    rule = WindowRule(size=30, working=1000, trigger=10)
    heavy = rows(6)
    folded = due(heavy, rule, lambda r: 300)  # 6 x 300 tokens: only 1 fits half the budget
    assert [r["number"] for r in folded] == [1, 2, 3, 4, 5]


@given(
    size=st.integers(1, 40),
    trigger=st.integers(1, 20),
    step=st.integers(1, 10),
    n=st.integers(0, 120),
)
def test_the_window_never_exceeds_its_size_and_folds_before_leaving(
    size: int, trigger: int, step: int, n: int
) -> None:
    rule = WindowRule(size=size, working=10**9, trigger=trigger, step=min(step, size))
    window = in_window(rows(n), rule)
    assert len(window) <= size
    # A message leaves only once at least `leave_at` newer ones exist, and a fold is due
    # for it two messages (one exchange) before that.
    assert rule.keep <= max(0, rule.leave_at - 2)
