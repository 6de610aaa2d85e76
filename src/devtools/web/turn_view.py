"""One turn as the web page shows it: built from `runs.turn_detail`, with the messages
each model call was sent (counted with the project's token counter), the tool calls
and their results, and the turn's model calls from `llm_calls`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from src.devtools.runs import ERROR, ROUTE, describe_write, jsonable, writer_of
from src.devtools.turns import Step, Turn
from src.graph.tokens import TokenCounter, count_messages, message_text

ROLES = {"human": "user", "ai": "assistant"}


@dataclass
class Change:
    """One channel a node wrote: a short summary, and the whole value as JSON."""

    node: str
    channel: str
    summary: list[str]
    value: str


@dataclass
class TimelineRow:
    """One checkpoint of the turn: the node(s) that ran from it and what they wrote."""

    step: Step
    ran: str
    changes: list[Change] = field(default_factory=list)
    routes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def replayable(self) -> bool:
        """Whether anything runs after this checkpoint (the turn's last one: nothing)."""
        return bool(self.step.next_nodes)


@dataclass
class ModelMessage:
    """One message as sent to the model, with its tokens."""

    role: str
    text: str
    tokens: int
    tool_calls: list[str] = field(default_factory=list)


@dataclass
class ModelCall:
    """One call of the agent node: what it was sent and what it answered."""

    messages: list[ModelMessage]
    answer: ModelMessage | None

    @property
    def tokens(self) -> int:
        return sum(m.tokens for m in self.messages)


@dataclass
class ToolCall:
    """One tool the model asked for, with its arguments and the result it got."""

    name: str
    args: str
    result: str | None


@dataclass
class TurnView:
    """Everything the turn page shows."""

    turn: Turn
    index: int
    count: int
    counter: str
    timeline: list[TimelineRow]
    calls: list[ModelCall]
    tools: list[ToolCall]
    usage_calls: list[dict[str, Any]]

    @property
    def visited(self) -> set[str]:
        """The graph's nodes this turn ran (start and end included when it finished)."""
        ran = {"__start__", *self.turn.nodes}
        return ran | ({"__end__"} if self.turn.status == "ok" else set())


def model_message(message: BaseMessage, counter: TokenCounter) -> ModelMessage:
    """Return a message as the page lists it: role, text, tokens, the tools it calls."""
    calls = []
    if isinstance(message, AIMessage):
        calls = [f"{c['name']}({_json(c['args'])})" for c in message.tool_calls]
    text = str(message.text)
    if isinstance(message, ToolMessage):
        text = f"[{message.name or message.tool_call_id}] {text}"
    return ModelMessage(
        ROLES.get(message.type, message.type), text, count_messages([message], counter), calls
    )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _pretty(value: Any) -> str:
    return json.dumps(jsonable(value), ensure_ascii=False, indent=2, default=str)


def timeline(detail: dict[str, Any]) -> list[TimelineRow]:
    """Return the turn's checkpoints with what each node wrote, oldest first."""
    rows = []
    for item in detail["steps"]:
        step: Step = item["step"]
        ran = ", ".join(step.nodes) or ("(end of turn)" if not step.next_nodes else "(not run)")
        row = TimelineRow(step, ran)
        for write in item["writes"]:
            channel = write["channel"]
            if channel.startswith(ROUTE):
                row.routes.append(channel.removeprefix(ROUTE))
            elif channel == ERROR:
                row.error = str(write["value"])
            elif not channel.startswith("__"):
                summary = describe_write(channel, write["value"], item["before"])
                node = writer_of(step, write["task_id"])
                row.changes.append(Change(node, channel, summary, _pretty(write["value"])))
        rows.append(row)
    return rows


def model_calls(detail: dict[str, Any], counter: TokenCounter) -> list[ModelCall]:
    """Return each agent step's input messages (the state it started from) and answer."""
    calls = []
    for item in detail["steps"]:
        step: Step = item["step"]
        if "agent" not in step.nodes:
            continue
        before = item["before"]
        # The context, then this turn's answers and tool results so far (before the
        # context was a channel of its own, all of it was in `messages`).
        shown = [*(before.get("context") or []), *(before.get("messages") or [])]
        sent = [m for m in shown if isinstance(m, BaseMessage)]
        answers = [
            w["value"]
            for w in item["writes"]
            if w["channel"] == "messages" and writer_of(step, w["task_id"]) == "agent"
        ]
        answer = _first_ai(answers)
        calls.append(
            ModelCall(
                [model_message(m, counter) for m in sent],
                None if answer is None else model_message(answer, counter),
            )
        )
    return calls


def _first_ai(values: list[Any]) -> AIMessage | None:
    for value in values:
        for message in value if isinstance(value, list) else [value]:
            if isinstance(message, AIMessage):
                return message
    return None


def tool_calls(detail: dict[str, Any]) -> list[ToolCall]:
    """Return the tools the model called this turn, each with the result it was given."""
    asked: list[tuple[str, ToolCall]] = []
    results: dict[str, str] = {}
    for item in detail["steps"]:
        for write in item["writes"]:
            if write["channel"] != "messages":
                continue
            value = write["value"]
            for message in value if isinstance(value, list) else [value]:
                if isinstance(message, AIMessage):
                    asked.extend(
                        (
                            str(c.get("id")),
                            ToolCall(c["name"], _json(c["args"]), None),
                        )
                        for c in message.tool_calls
                    )
                elif isinstance(message, ToolMessage):
                    results[message.tool_call_id] = message_text(message)
    for call_id, call in asked:
        call.result = results.get(call_id)
    return [call for _, call in asked]


def turn_id_of(turn: Turn) -> str | None:
    """Return the id that groups the turn's model calls in `llm_calls` (live turns only)."""
    for step in turn.steps:
        if step.metadata.get("turn_id"):
            return str(step.metadata["turn_id"])
    return None


def turn_view(
    detail: dict[str, Any], counter: TokenCounter, usage_calls: list[dict[str, Any]]
) -> TurnView:
    """Return the turn page's content for `runs.turn_detail`'s result."""
    return TurnView(
        turn=detail["turn"],
        index=detail["index"],
        count=detail["count"],
        counter=counter.name,
        timeline=timeline(detail),
        calls=model_calls(detail, counter),
        tools=tool_calls(detail),
        usage_calls=usage_calls,
    )
