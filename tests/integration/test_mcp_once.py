"""An MCP tool is called once per call of a turn: a turn run again after it failed half-way
(its update comes back) and `tgagent replay` get the recorded result; `--live-tools` calls
the tool. Every call is recorded for usage. A real stdio server written with the `mcp` SDK
that writes a line per call to a file, the real ChatOpenAI client against the fake
OpenAI-compatible server, real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from src.cli.usage import render
from src.devtools.checkpoints import CheckpointReader
from src.devtools.replay import replay
from src.services.usage_report import UsageReports
from src.storage.delivery_repo import Delivery
from tests.db_scan import traces
from tests.e2e.test_devtools_cli import run_cli
from tests.fakes.openai_server import Fault
from tests.integration.test_mcp_tools import (
    ANN,
    CHAT,
    call,
    last_result,
    mcp_of,
    stdio_server,
    tool_messages,
    write_config,
)

# Every test starts MCP server processes (a second or more each).
pytestmark = pytest.mark.slow


def counting(tmp_path: Path, **more: Any) -> tuple[Path, Path]:
    """Return the config of the fake stdio server whose `count` tool notes each call in a
    file, and that file."""
    calls = tmp_path / "calls.txt"
    entry = stdio_server(env={"FAKE_MCP_CALLS": str(calls)}, **more)
    return write_config(tmp_path, {"fake": entry}), calls


def made(calls: Path) -> list[str]:
    """Return the calls the server ran, in order (the text of each)."""
    return calls.read_text(encoding="utf-8").splitlines() if calls.exists() else []


async def recorded(rt: Any) -> list[dict[str, Any]]:
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT owner_id, message_id, server, tool, outcome, ms, result FROM mcp_calls"
            " ORDER BY id"
        )
        return list(await cur.fetchall())


async def an_update(rt: Any, update_id: int, chat: int) -> Delivery:
    """Store an update in the inbox, as the bot does before its turn runs."""
    async with rt.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO inbox (update_id, chat_id, payload) VALUES (%s, %s, '{}')",
            (update_id, chat),
        )
    return Delivery(update_id, chat)


async def test_a_turn_run_again_after_it_failed_past_the_call_does_not_call_again(
    tmp_path: Path, runtime_factory: Any, llm: Any
) -> None:
    path, calls = counting(tmp_path)
    rt = await runtime_factory(mcp_config=path)
    delivery = await an_update(rt, 43_001, ANN.owner_id)
    # The tool ran; the model's next answer never came: the turn ends unanswered.
    llm.script_for(CHAT, call("fake_count", text="order pizza"), Fault(status=500))
    first = await rt.service.handle_message(ANN, "order a pizza", delivery)
    assert not first.ok
    assert made(calls) == ["order pizza"]
    # The update runs again (its worker died, Telegram sent it again): the model asks
    # for the same call under a new id, and gets the first run's result.
    llm.script_for(CHAT, call("fake_count", text="order pizza"), "Ordered.")
    again = await rt.service.handle_message(ANN, "order a pizza", delivery)
    assert again.reply == "Ordered." and again.tools_used == ["fake_count"]
    assert made(calls) == ["order pizza"]
    assert last_result(llm) == (
        '<tool_output tool="fake_count">\nnoted order pizza (call 1)\n</tool_output>'
    )
    [row] = await recorded(rt)
    assert (row["server"], row["tool"], row["outcome"]) == ("fake", "count", "ok")
    assert row["owner_id"] == ANN.owner_id and row["ms"] > 0
    # A new message is a new turn: the same call is made again.
    llm.script_for(CHAT, call("fake_count", text="order pizza"), "Another one.")
    assert (await rt.service.handle_message(ANN, "one more")).reply == "Another one."
    assert made(calls) == ["order pizza", "order pizza"]


async def test_one_turn_calling_a_tool_twice_on_purpose_calls_it_twice(
    tmp_path: Path, runtime_factory: Any, llm: Any
) -> None:
    """The call's key counts the calls of one tool with the same arguments: the model's
    second call is a call of its own, once as well."""
    path, calls = counting(tmp_path)
    rt = await runtime_factory(mcp_config=path)
    delivery = await an_update(rt, 43_002, ANN.owner_id)
    twice = {"tool_calls": [{"name": "fake_count", "args": {"text": "ring"}}] * 2}
    llm.script_for(CHAT, twice, Fault(status=500))
    assert not (await rt.service.handle_message(ANN, "ring twice", delivery)).ok
    assert made(calls) == ["ring", "ring"]
    # Run again, with one call more of the same: only that one is made.
    llm.script_for(CHAT, twice, call("fake_count", text="ring"), "Rang three times.")
    again = await rt.service.handle_message(ANN, "ring twice", delivery)
    assert again.reply == "Rang three times."
    assert made(calls) == ["ring", "ring", "ring"]
    assert [m.split("(")[-1] for m in tool_messages(llm)] == [
        "call 1)\n</tool_output>",
        "call 2)\n</tool_output>",
        "call 3)\n</tool_output>",
    ]


async def test_a_replay_gives_the_recorded_result_and_live_tools_call_the_tool(
    tmp_path: Path, runtime_factory: Any, llm: Any
) -> None:
    path, calls = counting(tmp_path)
    rt = await runtime_factory(mcp_config=path)
    llm.script_for(CHAT, call("fake_count", text="once"), "Done once.")
    result = await rt.service.handle_message(ANN, "count once")
    await rt.service.drain()
    assert result.conversation_id is not None and made(calls) == ["once"]
    turns = await CheckpointReader(rt.pool).turns(result.conversation_id)
    head = turns[0].head.checkpoint_id
    recorded_said = '<tool_output tool="fake_count">\nnoted once (call 1)\n</tool_output>'

    llm.script_for(CHAT, call("fake_count", text="once"), "Replayed.")
    outcome = await replay(rt.pool, rt.settings, result.conversation_id, head)
    assert outcome.error is None and outcome.reply == "Replayed."
    assert outcome.tools_used == ["fake_count"]
    assert last_result(llm) == recorded_said
    assert made(calls) == ["once"]
    # A call the recorded turn did not make is not made either.
    llm.script_for(CHAT, call("fake_count", text="other"), "Nothing recorded.")
    outcome = await replay(rt.pool, rt.settings, result.conversation_id, head)
    assert outcome.reply == "Nothing recorded."
    assert last_result(llm).startswith("Error: the replay calls no MCP tool")
    assert made(calls) == ["once"]
    # --live-tools: the tool is called, and nothing of it is kept.
    llm.script_for(CHAT, call("fake_count", text="once"), "Called live.")
    outcome = await replay(rt.pool, rt.settings, result.conversation_id, head, live_tools=True)
    assert outcome.reply == "Called live."
    assert made(calls) == ["once", "once"]
    assert "noted once (call 2)" in last_result(llm)
    assert len(await recorded(rt)) == 1
    assert mcp_of(rt).calls == 1  # the bot's own servers made the turn's call only


async def test_every_call_is_recorded_for_usage(
    tmp_path: Path, runtime_factory: Any, llm: Any
) -> None:
    path, _ = counting(tmp_path)
    rt = await runtime_factory(mcp_config=path, mcp_tool_timeout=1)
    llm.script_for(
        CHAT,
        call("fake_count", text="a"),
        call("fake_hang"),
        call("fake_fail", reason="no"),
        "Done.",
    )
    assert (await rt.service.handle_message(ANN, "do three things")).reply == "Done."
    rows = await recorded(rt)
    assert [(r["tool"], r["outcome"]) for r in rows] == [
        ("count", "ok"),
        ("hang", "timeout"),
        ("fail", "error"),
    ]
    assert rows[1]["ms"] >= 1000 and rows[1]["result"].startswith("Error: the tool fake_hang")
    assert rt.service.usage is not None
    report = await UsageReports(rt.service.usage).operator(1)
    tools = {t["tool"]: t for t in report["mcp_tools"]}
    assert tools["fake_hang"]["outcomes"] == {"timeout": 1}
    assert tools["fake_count"]["calls"] == 1 and tools["fake_count"]["avg_ms"] > 0
    assert "  fake_hang: 1 (1 timeout)" in render(report)
    json.dumps(report)  # `tgagent usage --json` prints it


async def test_search_and_summaries_say_a_line_came_from_a_tool(
    tmp_path: Path, runtime_factory: Any, llm: Any
) -> None:
    """A tool's output is never a hit of search_history (it finds what people and the
    assistant said); a reply written from it is, marked as relaying the tool's output,
    and the memory models read it so labelled."""
    path, _ = counting(tmp_path)
    rt = await runtime_factory(mcp_config=path, max_context=2, summary_trigger=1)
    llm.script_for(CHAT, call("fake_count", text="zanzibarquux"), "It noted zanzibarquux.")
    await rt.service.handle_message(ANN, "note it please")
    llm.script_for(CHAT, "Fine.")
    await rt.service.handle_message(ANN, "and the weather?")
    llm.script_for(CHAT, call("search_history", query="zanzibarquux"), "Found it.")
    await rt.service.handle_message(ANN, "search")
    await rt.service.drain()
    found = last_result(llm)
    assert found.startswith("Found 1 message(s) for 'zanzibarquux'")
    assert "assistant (relaying fake_count's output): It noted zanzibarquux." in found
    assert "noted zanzibarquux (call" not in found
    memory = [json.dumps(r) for r in llm.requests if r.get("model") != CHAT]
    said = "[assistant, relaying fake_count's output]: It noted zanzibarquux."
    assert any(said in request for request in memory)
    assert not any("noted zanzibarquux (call" in request for request in memory)


async def test_erase_and_new_take_the_calls_record_with_them(
    tmp_path: Path, runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """What a tool returned for a person's turn is theirs: /new takes it with the
    conversation's messages, /erase with everything of theirs."""
    path, _ = counting(tmp_path)
    rt = await runtime_factory(mcp_config=path)
    marker = "qwertymarker"
    llm.script_for(CHAT, call("fake_count", text=f"{marker}-1"), "Noted.")
    await rt.service.handle_message(ANN, "note the first")
    assert await traces(pool, f"{marker}-1", ("mcp_calls",))
    await rt.service.new_conversation(ANN)
    assert await recorded(rt) == []
    llm.script_for(CHAT, call("fake_count", text=f"{marker}-2"), "Noted.")
    await rt.service.handle_message(ANN, "note the second")
    await rt.service.drain()
    assert len(await recorded(rt)) == 1
    await rt.service.erase(ANN)
    assert await traces(pool, marker) == []
    assert await recorded(rt) == []


async def test_tgagent_replay_calls_the_tool_only_with_live_tools(
    tmp_path: Path, runtime_factory: Any, llm: Any, fresh_schema: str
) -> None:
    path, calls = counting(tmp_path)
    rt = await runtime_factory(mcp_config=path)
    llm.script_for(CHAT, call("fake_count", text="cli"), "Done.")
    result = await rt.service.handle_message(ANN, "count it")
    await rt.service.drain()
    assert result.conversation_id is not None
    [turn] = await CheckpointReader(rt.pool).turns(result.conversation_id)
    env = {
        "DATABASE_URL": fresh_schema,
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test",
        "MCP_CONFIG": str(path),
    }
    args = ("replay", result.conversation_id, "--checkpoint", turn.head.checkpoint_id, "--json")
    for flags, reply, lines in (((), "Recorded.", 1), (("--live-tools",), "Live.", 2)):
        llm.script_for(CHAT, call("fake_count", text="cli"), reply)
        done = await asyncio.to_thread(run_cli, tmp_path, *args, *flags, **env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["replay"]["reply"] == reply
        assert made(calls) == ["cli"] * lines
