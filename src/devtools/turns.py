"""Turns as the checkpointer recorded them. A turn is the chain of checkpoints one
invocation wrote: it starts at a checkpoint whose metadata `source` is "input" (a new
message), "fork" (a copy made by `replay --commit`) or "update", and follows the
"loop" checkpoints whose parent is the previous one. LangGraph 1.2 writes no run id
into checkpoint metadata, so the parent chain is what ties a turn together."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langchain_core.messages import AIMessage

from src.graph.timestamps import strip_stamp

HEAD_SOURCES = ("input", "fork", "update")


@dataclass
class Step:
    """One checkpoint of a turn and the node(s) that ran from it."""

    checkpoint_id: str
    parent_id: str | None
    source: str
    step: int | None
    ts: datetime
    metadata: dict[str, Any]
    next_nodes: list[str]
    nodes: list[str] = field(default_factory=list)
    task_ids: list[str] = field(default_factory=list)
    failed: bool = False
    ms: float | None = None


@dataclass
class Turn:
    """The checkpoints one invocation wrote, oldest first, and the state it ended with."""

    thread_id: str
    steps: list[Step]
    user_id: int | None = None
    conversation_exists: bool = True
    values: dict[str, Any] = field(default_factory=dict)
    head_values: dict[str, Any] = field(default_factory=dict)

    @property
    def head(self) -> Step:
        return self.steps[0]

    @property
    def last(self) -> Step:
        return self.steps[-1]

    @property
    def duration_ms(self) -> float:
        return (self.last.ts - self.head.ts).total_seconds() * 1000

    @property
    def nodes(self) -> list[str]:
        return [n for s in self.steps for n in s.nodes if n != "__start__"]

    @property
    def status(self) -> str:
        if any(s.failed for s in self.steps):
            return "error"
        return "incomplete" if self.last.next_nodes else "ok"

    @property
    def input(self) -> dict[str, Any]:
        start = self.head_values.get("__start__")
        if isinstance(start, dict):
            return start
        return self.values

    @property
    def input_text(self) -> str:
        text = self.values.get("input_text") or self.input.get("input_text") or ""
        return strip_stamp(str(text))

    @property
    def reply(self) -> str:
        return str(self.values.get("reply") or "") if self.status == "ok" else ""

    @property
    def tools_used(self) -> list[str]:
        return list(self.values.get("tools_used") or [])

    @property
    def usage(self) -> dict[str, int]:
        return dict(self.values.get("usage") or {})

    @property
    def model(self) -> str | None:
        """The model that answered: as the endpoint named it, else as the turn chose it."""
        for message in reversed(self.values.get("messages") or []):
            if isinstance(message, AIMessage) and message.response_metadata.get("model_name"):
                return str(message.response_metadata["model_name"])
        return self.values.get("model") or None

    @property
    def fallback(self) -> bool:
        """Whether FALLBACK_MODEL answered because the chosen model kept failing."""
        return bool(self.values.get("fallback"))

    @property
    def replay_of(self) -> str | None:
        return self._meta("replay_of")

    @property
    def replay_model(self) -> str | None:
        return self._meta("replay_model")

    def _meta(self, key: str) -> str | None:
        # `replay` puts these in the run's config metadata; LangGraph copies them onto
        # the checkpoints the run writes (not onto the fork's first, copied, one).
        for step in self.steps:
            if step.metadata.get(key):
                return str(step.metadata[key])
        return None


def node_of(task_path: str) -> str:
    """Return the node name in a task path like `~__pregel_pull, agent`."""
    parts = task_path.lstrip("~").split(", ")
    if len(parts) >= 2 and parts[0] == "__pregel_pull":
        return parts[1]
    return task_path


def next_nodes(updated: Any) -> list[str]:
    """Return the nodes a checkpoint schedules, from the channels it updated."""
    channels = updated if isinstance(updated, list) else []
    nodes = [c.removeprefix("branch:to:") for c in channels if c.startswith("branch:to:")]
    return (["__start__"] if "__start__" in channels else []) + nodes


def split_turns(thread_id: str, steps: list[Step]) -> list[Turn]:
    """Group a thread's checkpoints (ordered by id) into turns, oldest first."""
    children: dict[str | None, list[Step]] = defaultdict(list)
    for step in steps:
        children[step.parent_id].append(step)
    turns = []
    for head in steps:
        if head.source not in HEAD_SOURCES:
            continue
        chain = [head]
        while True:
            after = [c for c in children[chain[-1].checkpoint_id] if c.source == "loop"]
            if not after:
                break
            chain.append(after[0])
        for a, b in zip(chain, chain[1:], strict=False):
            a.ms = (b.ts - a.ts).total_seconds() * 1000
        turns.append(Turn(thread_id, chain))
    return turns


def turn_containing(turns: list[Turn], checkpoint_id: str) -> Turn | None:
    """Return the turn one of whose checkpoints is `checkpoint_id`."""
    for turn in turns:
        if any(s.checkpoint_id == checkpoint_id for s in turn.steps):
            return turn
    return None
