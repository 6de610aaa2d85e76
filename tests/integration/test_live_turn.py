"""A live turn: the answer streams out of the graph as it is written, and /stop ends it.

AgentService, the graph, real PostgreSQL and the local model server, which streams.
"""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any

from src.cli.chat import Printer, answer_line
from src.graph.context.render import INTERRUPTED_NOTE
from src.services.agent_service import Identity, TurnStream
from src.services.texts import t

ANN = Identity(301, "ann", "Ann", "en")
WORDS = " ".join(f"word{i}" for i in range(60))


class Watch:
    """Collect what a live turn reports; stop it after `stop_after` pieces of text."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.pieces: list[str] = []
        self.tools: list[list[str]] = []
        self.stop_after = stop_after
        self.stream = TurnStream(self.on_text, self.tools.append)

    def on_text(self, piece: str) -> None:
        self.pieces.append(piece)
        if self.stop_after is not None and len(self.pieces) >= self.stop_after:
            self.stream.stop.set()


async def rows(rt: Any, owner: int) -> list[dict[str, Any]]:
    conversation = await rt.deps.conversations.get_or_create_conversation(owner)
    return list(await rt.deps.conversations.load_last_messages(conversation))


async def test_the_answer_streams_and_is_stored_whole(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.script(WORDS)
    watch = Watch()
    result = await rt.service.handle_message(ANN, "count", stream=watch.stream)
    assert result.ok and result.reply == WORDS
    assert len(watch.pieces) > 1 and "".join(watch.pieces) == WORDS
    assert llm.last_request()["stream"] is True  # one streaming call, not a second one
    assert len(llm.requests_for(llm.last_request()["model"])) == 1
    stored = await rows(rt, ANN.owner_id)
    assert [(r["role"], r["content"]) for r in stored][-1] == ("assistant", WORDS)
    assert stored[-1]["meta"] is None
    # Usage still counts from the stream.
    assert result.tokens_out > 0


async def test_a_turn_nobody_watches_does_not_stream(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.script("plain")
    assert (await rt.service.handle_message(ANN, "hi")).reply == "plain"
    assert not llm.last_request().get("stream")


async def test_tools_are_reported_by_name_and_the_answer_starts_after_them(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory()
    llm.script(
        {
            "content": "Let me look.",
            "tool_calls": [{"name": "search_history", "args": {"query": "cat"}}],
        },
        "Nothing about cats.",
    )
    watch = Watch()
    result = await rt.service.handle_message(ANN, "what about my cat?", stream=watch.stream)
    assert result.reply == "Nothing about cats."
    assert watch.tools == [["search_history"]]
    assert "".join(watch.pieces) == "Let me look.Nothing about cats."


async def test_stop_mid_answer_keeps_what_was_written_marked_interrupted(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory()
    llm.stream_delay = 0.05
    llm.script(WORDS)
    watch = Watch(stop_after=3)
    result = await rt.service.handle_message(ANN, "count slowly", stream=watch.stream)
    partial = "".join(watch.pieces)
    assert result.ok and partial and WORDS.startswith(partial.strip())
    assert len(partial) < len(WORDS)
    assert result.reply.startswith(partial.strip()) and result.reply.endswith("⏹ stopped")
    stored = (await rows(rt, ANN.owner_id))[-1]
    assert stored["role"] == "assistant" and stored["content"] == partial.strip()
    assert stored["meta"] == {"interrupted": True}
    await _cut_stream_seen(llm)
    # The next turn runs normally, and its model sees the partial answer, marked.
    llm.stream_delay = 0.0
    llm.script("Sure.")
    result = await rt.service.handle_message(ANN, "go on", stream=Watch().stream)
    assert result.reply == "Sure."
    said = [m["content"] for m in llm.last_request()["messages"] if m["role"] == "assistant"]
    assert said[-1].endswith(f"{partial.strip()}\n{INTERRUPTED_NOTE}")


async def _cut_stream_seen(llm: Any) -> None:
    """The model call was really cancelled: the server saw its client go."""
    deadline = time.monotonic() + 5
    while llm.cancelled_streams < 1:
        assert time.monotonic() < deadline, "the model call was not cancelled"
        await asyncio.sleep(0.02)


async def test_stop_before_the_first_token_ends_the_turn_at_once(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory()
    llm.delay_next(1, 30.0)
    llm.script("too late")
    watch = Watch()
    turn = asyncio.create_task(rt.service.handle_message(ANN, "slow", stream=watch.stream))
    while not llm.in_flight:
        await asyncio.sleep(0.01)
    watch.stream.stop.set()
    result = await asyncio.wait_for(turn, 5)
    assert result.ok and result.reply == "Stopped."
    stored = (await rows(rt, ANN.owner_id))[-1]
    assert (stored["content"], stored["meta"]) == ("Stopped.", {"interrupted": True})


async def test_stop_while_a_tool_runs_keeps_its_records(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.script({"tool_calls": [{"name": "search_history", "args": {"query": "cat"}}]}, "unused")
    watch = Watch()
    watch.stream.on_tools = lambda names: watch.stream.stop.set()
    result = await rt.service.handle_message(ANN, "find my cat", stream=watch.stream)
    assert result.ok and result.reply == "Stopped."
    stored = await rows(rt, ANN.owner_id)
    roles = [r["role"] for r in stored]
    # The tool ran and is on record; no second model call was made.
    assert roles == ["user", "assistant", "tool", "system", "assistant"]
    assert stored[1]["meta"]["tool_calls"][0]["name"] == "search_history"
    assert stored[-1]["meta"] == {"interrupted": True}
    assert llm.pending_replies() == 1


async def test_the_terminal_chat_prints_the_answer_as_it_is_written(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory()
    out = io.StringIO()
    printer = Printer(out, "en")
    search = {"name": "search_history", "args": {"query": "cat"}}
    llm.script({"content": "Let me look.", "tool_calls": [search]}, "Nothing about cats.")
    reply = await answer_line(rt.service, ANN, "my cat?", printer.stream)
    printer.end(reply)
    status = t("status_search", "en")
    assert out.getvalue() == f"Let me look.\n({status})\nNothing about cats.\n"
