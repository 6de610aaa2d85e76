"""`tgagent runs list|show`: past turns from the checkpointer, node by node."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from src.devtools.checkpoints import CheckpointReader
from src.devtools.common import DevtoolsError, shorten
from src.devtools.turns import Step, Turn, turn_containing

ROUTE = "branch:to:"
ERROR = "__error__"
# Channels shown as a count; history, facts and compacts: checkpoints of earlier versions.
COUNTED = {"history": "messages", "facts": "facts", "compacts": "compacts", "thread": "positions"}


def _when(turn_or_step: Turn | Step) -> str:
    ts = turn_or_step.head.ts if isinstance(turn_or_step, Turn) else turn_or_step.ts
    return ts.strftime("%Y-%m-%d %H:%M:%S UTC")


def _tokens(turn: Turn) -> str:
    usage = turn.usage
    return f"{usage.get('input', 0)} in / {usage.get('output', 0)} out"


def _kind(turn: Turn) -> str:
    if turn.head.source == "input":
        return "new message"
    if turn.replay_of:
        return f"fork: replay of {turn.replay_of} with {turn.replay_model or '?'}"
    return turn.head.source


def turn_summary(turn: Turn) -> dict[str, Any]:
    """Return one turn as `runs list --json` prints it."""
    return {
        "thread_id": turn.thread_id,
        "user_id": turn.user_id,
        "conversation_exists": turn.conversation_exists,
        "checkpoint_id": turn.head.checkpoint_id,
        "source": turn.head.source,
        "replay_of": turn.replay_of,
        "replay_model": turn.replay_model,
        "started_at": turn.head.ts.isoformat(),
        "duration_ms": round(turn.duration_ms, 1),
        "status": turn.status,
        "message": turn.input_text,
        "nodes": turn.nodes,
        "tools_used": turn.tools_used,
        "tokens": turn.usage,
        "model": turn.model,
        "fallback": turn.fallback,
        "reply": turn.reply,
    }


def format_turn_list(turns: list[Turn]) -> str:
    """Render turns newest first, one block each."""
    if not turns:
        return "no runs recorded yet"
    blocks = []
    for turn in turns:
        owner = f"user {turn.user_id}" if turn.user_id is not None else "user ?"
        if not turn.conversation_exists:
            owner += " (conversation deleted)"
        blocks.append(
            "\n".join(
                [
                    f"{_when(turn)}  {turn.status:<10} {turn.duration_ms:7.1f} ms  "
                    f"tokens {_tokens(turn)}",
                    f"  thread      {turn.thread_id}  ({owner})",
                    f"  checkpoint  {turn.head.checkpoint_id}  ({_kind(turn)})",
                    f"  message     {shorten(turn.input_text, 70)!r}",
                    f"  nodes       {' > '.join(turn.nodes) or '-'}",
                    f"  tools       {', '.join(turn.tools_used) or '-'}",
                    f"  model       {turn.model or '?'}" + (" (fallback)" if turn.fallback else ""),
                ]
            )
        )
    return "\n\n".join(blocks)


def describe_message(message: Any) -> str:
    """Return one message as a short line."""
    if isinstance(message, RemoveMessage):
        if message.id == REMOVE_ALL_MESSAGES:
            return "(all earlier messages removed)"
        return f"(message {message.id} removed)"
    if isinstance(message, AIMessage):
        calls = [
            f"{c['name']}({json.dumps(c['args'], ensure_ascii=False)})" for c in message.tool_calls
        ]
        text = f"ai: {shorten(message.text, 80)!r}" if message.text else "ai:"
        return text + (" calls " + ", ".join(shorten(c, 80) for c in calls) if calls else "")
    if isinstance(message, ToolMessage):
        return f"tool {message.name or message.tool_call_id}: {shorten(message.text, 80)!r}"
    if isinstance(message, SystemMessage):
        return f"system prompt ({len(message.text)} chars)"
    if isinstance(message, HumanMessage):
        return f"user: {shorten(message.text, 80)!r}"
    if isinstance(message, BaseMessage):
        return f"{message.type}: {shorten(message.text, 80)!r}"
    return shorten(repr(message), 80)


def describe_write(channel: str, value: Any, before: dict[str, Any]) -> list[str]:
    """Return how one write changed the state, in a few short lines."""
    if channel == "messages":
        items = value if isinstance(value, list) else [value]
        return [f"messages + {describe_message(m)}" for m in items]
    if channel == "context" and isinstance(value, list):
        if not value:  # save_response: the next turn builds its own
            return ["context: cleared (answered)"]
        return [f"context: {describe_message(m)}" for m in value]
    if channel in COUNTED and isinstance(value, list):
        return [f"{channel}: {len(value)} {COUNTED[channel]}"]
    if channel == "summary":
        old = before.get("summary") or ""
        if value == old:
            return ["summary: unchanged"]
        return [f"summary: {shorten(old, 40)!r} -> {shorten(value, 80)!r}"]
    if isinstance(value, str):
        return [f"{channel}: {shorten(value, 90)!r}"]
    if isinstance(value, dict | list):
        return [f"{channel}: {shorten(json.dumps(value, ensure_ascii=False, default=str), 90)}"]
    return [f"{channel}: {value!r}"]


def jsonable(value: Any) -> Any:
    """Return `value` in plain JSON types (messages as dicts)."""
    if isinstance(value, BaseMessage):
        out: dict[str, Any] = {"type": value.type, "id": value.id, "content": value.content}
        if isinstance(value, AIMessage):
            out["tool_calls"] = value.tool_calls
            out["model"] = value.response_metadata.get("model_name")
        if isinstance(value, ToolMessage):
            out |= {"tool_call_id": value.tool_call_id, "name": value.name}
        return out
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


async def turn_detail(
    reader: CheckpointReader, thread: str, checkpoint: str | None
) -> dict[str, Any]:
    """Return one turn step by step: node, time, what it wrote (`runs show --json`)."""
    thread_id = await reader.resolve_thread(thread)
    turns = await reader.turns(thread_id)
    if not turns:
        raise DevtoolsError(f"thread {thread_id} has checkpoints but no complete turn to show")
    if checkpoint is None:
        turn = turns[-1]
    else:
        checkpoint_id = await reader.resolve_checkpoint(thread_id, checkpoint)
        found = turn_containing(turns, checkpoint_id)
        if found is None:
            raise DevtoolsError(f"checkpoint {checkpoint_id} belongs to no turn of {thread_id}")
        turn = found
    await reader.load_values(turn)
    steps = []
    for step in turn.steps:
        snapshot = await reader.tuple(thread_id, step.checkpoint_id)
        before = dict(snapshot.checkpoint["channel_values"])
        writes = [
            {"task_id": task_id, "channel": channel, "value": value}
            for task_id, channel, value in snapshot.pending_writes or []
        ]
        steps.append({"step": step, "before": before, "writes": writes})
    return {
        "turn": turn,
        "index": turns.index(turn) + 1,
        "count": len(turns),
        "steps": steps,
    }


def detail_json(detail: dict[str, Any]) -> dict[str, Any]:
    """Return `turn_detail` in plain JSON types."""
    turn: Turn = detail["turn"]
    out = turn_summary(turn) | {"turn": detail["index"], "turns_in_thread": detail["count"]}
    out["steps"] = [
        {
            "checkpoint_id": s["step"].checkpoint_id,
            "step": s["step"].step,
            "source": s["step"].source,
            "at": s["step"].ts.isoformat(),
            "ms": None if s["step"].ms is None else round(s["step"].ms, 2),
            "nodes": s["step"].nodes,
            "next": s["step"].next_nodes,
            "writes": [
                {
                    "node": writer_of(s["step"], w["task_id"]),
                    "channel": w["channel"],
                    "value": jsonable(w["value"]),
                }
                for w in s["writes"]
            ],
        }
        for s in detail["steps"]
    ]
    return out


def writer_of(step: Step, task_id: str) -> str:
    """Return the node whose task `task_id` wrote at this step."""
    if task_id in step.task_ids:
        return step.nodes[step.task_ids.index(task_id)]
    return task_id


def format_turn_detail(detail: dict[str, Any]) -> str:
    """Render one turn node by node for the terminal."""
    turn: Turn = detail["turn"]
    owner = f"user {turn.user_id}" if turn.user_id is not None else "user ?"
    lines = [
        f"turn {detail['index']} of {detail['count']} in thread {turn.thread_id} ({owner})",
        f"started {_when(turn)}, {turn.duration_ms:.1f} ms, {turn.status}, "
        f"tokens {_tokens(turn)}, model {turn.model or '?'}"
        + (" (the fallback: the chosen model failed)" if turn.fallback else ""),
        f"first checkpoint {turn.head.checkpoint_id} ({_kind(turn)})",
        f"message: {shorten(turn.input_text, 100)!r}",
        f"reply:   {shorten(turn.reply, 100)!r}" if turn.reply else "reply:   (none)",
        "",
        f"[step] {'took':>10}  {'node':<14} from checkpoint (the state the node started with)",
    ]
    for item in detail["steps"]:
        step: Step = item["step"]
        ms = f"{step.ms:7.1f} ms" if step.ms is not None else "          "
        ran = ", ".join(step.nodes) or ("(end of turn)" if not step.next_nodes else "(not run)")
        label = "?" if step.step is None else str(step.step)
        lines.append(f"[{label:>4}] {ms}  {ran:<14} from {step.checkpoint_id}")
        routes = []
        for write in item["writes"]:
            channel = write["channel"]
            if channel.startswith(ROUTE):
                routes.append(channel.removeprefix(ROUTE))
            elif channel == ERROR:
                lines.append(f"        ERROR: {shorten(write['value'], 120)}")
            elif not channel.startswith("__"):
                lines.extend(
                    f"        {line}"
                    for line in describe_write(channel, write["value"], item["before"])
                )
        if routes:
            lines.append(f"        -> {', '.join(routes)}")
    return "\n".join(lines)
