"""`tgagent bot` with an MCP server, killed in the middle of turns: a turn run again by the
next process never calls a tool a second time. The real bot process against the fake Bot
API and the fake model, a real stdio MCP server (the `mcp` SDK) that notes each call in a
file, real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CHAT_MODEL
from tests.e2e.test_reliability_process import bot_env, bot_process, terminate
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.openai_server import message_text
from tests.integration.test_mcp_tools import SERVER

pytestmark = [pytest.mark.server, pytest.mark.slow]


def model(request: dict[str, Any]) -> Any:
    """Answer the chat model: "pizza" asks for `fake_count`, "slow" for `fake_hang`, and a
    tool's result is answered with its text; the memory models get nothing ("[]")."""
    if request.get("model") != CHAT_MODEL:
        return "[]"
    last = request["messages"][-1]
    said = message_text(last)
    if last["role"] == "tool":
        lines = said.splitlines()
        return "done: " + (lines[1] if said.startswith("<tool_output") else lines[0])
    if "pizza" in said:
        return {"tool_calls": [{"name": "fake_count", "args": {"text": "pizza"}}]}
    if "slow" in said:
        return {"tool_calls": [{"name": "fake_hang", "args": {}}]}
    return "hello"


def made(calls: Path) -> list[str]:
    return calls.read_text(encoding="utf-8").splitlines() if calls.exists() else []


async def until(condition: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_sigkill_after_and_during_a_tool_call_never_calls_it_again(
    pool: Any, fresh_schema: str, tg: FakeBotAPI, llm: Any, tmp_path: Path
) -> None:
    pizza, slow = 8431, 8432
    calls = tmp_path / "calls.txt"
    config = tmp_path / "mcp.json"
    entry = {
        "command": sys.executable,
        "args": [SERVER, "stdio"],
        "env": {"FAKE_MCP_CALLS": str(calls)},
        "allow": "allowed",
    }
    config.write_text(json.dumps({"mcpServers": {"fake": entry}}), encoding="utf-8")
    env = bot_env(fresh_schema, tg, llm, MCP_CONFIG=str(config), MCP_TOOL_TIMEOUT="600")
    llm.default_reply = model
    async with bot_process(env, tg, tmp_path) as proc:
        # The tool call comes at once; the answer after its result hangs.
        llm.delay_next(1, 0.0)
        llm.delay = 60.0
        tg.push_text(pizza, "order a pizza")
        await until(lambda: made(calls) == ["pizza"] and len(llm.requests_for(CHAT_MODEL)) == 2)
        # Another chat's tool is under way (it never answers) when the process dies.
        llm.delay_next(1, 0.0)
        tg.push_text(slow, "something slow")
        await until(lambda: made(calls) == ["pizza", "hang"])
        proc.kill()
        await asyncio.to_thread(proc.wait, 10)
    assert tg.texts_to(pizza) == tg.texts_to(slow) == []

    llm.delay = 0.0
    async with bot_process(env, tg, tmp_path) as proc:
        await tg.await_messages(pizza, 1, timeout=60)
        await tg.await_messages(slow, 1, timeout=60)
        await terminate(proc)
    assert proc.returncode == 0
    # Each turn ran again and asked for its call again: the finished one got its
    # recorded result, the one whose answer was lost is not sent again.
    assert made(calls) == ["pizza", "hang"]
    assert tg.texts_to(pizza) == ["done: noted pizza (call 1)"]
    [said] = tg.texts_to(slow)
    assert said.startswith("done: Error: an earlier run of this turn called fake_hang")
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT tool, outcome FROM mcp_calls ORDER BY id")
        rows = [(r["tool"], r["outcome"]) for r in await cur.fetchall()]
    assert rows == [("count", "ok"), ("hang", "running")]
