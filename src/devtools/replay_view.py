"""How `tgagent replay` prints a replay: the recorded turn and the new run side by side."""

from __future__ import annotations

import shutil
import textwrap
from itertools import zip_longest
from typing import Any

from src.devtools.replay import ReplayOutcome


def _column(
    title: str, reply: str, tools: list[str], usage: dict[str, int], nodes: list[str]
) -> list[str]:
    return [
        title,
        *(reply.splitlines() or ["(no reply)"]),
        "",
        f"tools:  {', '.join(tools) or '-'}",
        f"tokens: {usage.get('input', 0)} in / {usage.get('output', 0)} out",
        f"nodes:  {' > '.join(n for n in nodes if n != '__start__') or '-'}",
    ]


def side_by_side(left: list[str], right: list[str], width: int) -> str:
    """Wrap two columns of lines to fit `width` and print them next to each other."""
    col = max(20, (width - 3) // 2)

    def wrap(lines: list[str]) -> list[str]:
        out: list[str] = []
        for line in lines:
            out.extend(textwrap.wrap(line, col, replace_whitespace=False) or [""])
        return out

    rows = [
        f"{a:<{col}} | {b}".rstrip() for a, b in zip_longest(wrap(left), wrap(right), fillvalue="")
    ]
    rule = "-" * col + "-+-" + "-" * col
    return "\n".join([rows[0], rule, *rows[1:]])


def format_outcome(outcome: ReplayOutcome, width: int | None = None) -> str:
    """Return the replay report for the terminal."""
    width = width or min(160, shutil.get_terminal_size((120, 24)).columns)
    rec = outcome.recorded
    where = f"turn {outcome.turn_index}, " if outcome.turn_index else ""
    lines = [
        f"replay of thread {outcome.thread_id}",
        f"from checkpoint {outcome.checkpoint_id} ({where}next: {', '.join(outcome.next_nodes)})",
    ]
    if outcome.kept_messages_upto is not None:
        hidden = outcome.hidden_messages
        lines.append(
            f"history as at that checkpoint: messages up to #{outcome.kept_messages_upto} "
            f"({hidden} later {'message' if hidden == 1 else 'messages'} hidden during the replay)"
        )
    if outcome.committed:
        lines += [
            f"committed: fork {outcome.fork_id} in the same thread (a copy of the checkpoint),",
            f"  the replayed turn ends at {outcome.last_checkpoint_id}; see it with",
            f"  tgagent runs show {outcome.thread_id} --checkpoint {outcome.fork_id}",
            "  users' tables were not written (the replay ran on a copy, rolled back)",
        ]
    else:
        lines.append(
            "dry run: nothing was written (users' tables copied, checkpoints kept in memory)"
        )
    lines.append("")
    if rec is not None:
        recorded_reply = rec.reply or f"(no reply: the recorded turn is {rec.status})"
        left = _column(
            f"recorded ({rec.model or '?'}, {rec.duration_ms:.0f} ms)",
            recorded_reply,
            rec.tools_used,
            rec.usage,
            rec.nodes,
        )
    else:
        left = ["recorded", "", "(the checkpoint belongs to no complete turn)"]
    new_reply = outcome.reply if outcome.error is None else f"(failed: {outcome.error})"
    right = _column(
        f"replay ({outcome.model_seen or outcome.model}, {outcome.ms:.0f} ms)",
        new_reply,
        outcome.tools_used,
        outcome.usage,
        outcome.nodes,
    )
    lines.append(side_by_side(left, right, width))
    if outcome.error is None and rec is not None:
        same = rec.reply == outcome.reply
        lines.extend(["", "the replies are identical" if same else "the replies differ"])
    return "\n".join(lines)


def outcome_json(outcome: ReplayOutcome) -> dict[str, Any]:
    """Return the replay report in plain JSON types."""
    rec = outcome.recorded
    return {
        "thread_id": outcome.thread_id,
        "checkpoint_id": outcome.checkpoint_id,
        "next": outcome.next_nodes,
        "committed": outcome.committed,
        "fork_checkpoint_id": outcome.fork_id if outcome.committed else None,
        "last_checkpoint_id": outcome.last_checkpoint_id if outcome.committed else None,
        "messages_kept_upto": outcome.kept_messages_upto,
        "messages_hidden": outcome.hidden_messages,
        "recorded": None
        if rec is None
        else {
            "turn": outcome.turn_index,
            "checkpoint_id": rec.head.checkpoint_id,
            "status": rec.status,
            "model": rec.model,
            "reply": rec.reply,
            "tools_used": rec.tools_used,
            "tokens": rec.usage,
            "nodes": rec.nodes,
            "duration_ms": round(rec.duration_ms, 1),
        },
        "replay": {
            "model": outcome.model_seen or outcome.model,
            "reply": outcome.reply,
            "error": outcome.error,
            "tools_used": outcome.tools_used,
            "tokens": outcome.usage,
            "nodes": outcome.nodes,
            "duration_ms": round(outcome.ms, 1),
        },
    }
