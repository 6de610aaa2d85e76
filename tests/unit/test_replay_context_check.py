"""Replay refuses the middle of a turn recorded before the context had its own channel."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint

from src.devtools.common import EXIT_INCOMPATIBLE, DevtoolsError
from src.devtools.replay import check_context


def saved(*channels: str) -> CheckpointTuple:
    checkpoint: Any = empty_checkpoint()
    checkpoint["channel_versions"] = {c: "0000000001.00000000" for c in channels}
    return CheckpointTuple({"configurable": {"thread_id": "t"}}, checkpoint, {}, None, [])


def test_a_turn_recorded_before_is_replayed_whole_only() -> None:
    old = saved("messages", "thread", "user_id")
    check_context(old, ["__start__"])  # its first checkpoint: the whole turn
    check_context(old, ["build_context"])
    check_context(old, [])  # the end of a turn: refused elsewhere, with its own reason
    with pytest.raises(DevtoolsError, match="first checkpoint") as refused:
        check_context(old, ["agent"])
    assert refused.value.code == EXIT_INCOMPATIBLE


def test_a_turn_recorded_now_replays_from_any_node() -> None:
    check_context(saved("context", "messages", "thread"), ["agent"])
    check_context(saved("context", "messages"), ["save_response"])
    check_context(saved("user_id"), ["agent"])  # no messages at all: nothing to refuse
