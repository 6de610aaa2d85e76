"""What an MCP tool call adds to a turn: `python -m bench mcp [--turns N]`.

Runs turns through the real service (`build_runtime`: the graph, PostgreSQL and its
checkpoints) with a chat model answering in-process at once, so that what is timed is
tgagent's own work: turns without a tool, turns with one round of a built-in tool
(`recall_previous_conversations`, one query) and turns with one round of an MCP tool over
stdio (`bench/mcp_echo.py`, a tool that returns at once; its call recorded, claimed before
it is sent and finished after, as in every turn); then the MCP call alone (`McpTools.run`,
unrecorded) and its record alone (claimed and finished: what makes a call happen once).
The difference between the last two kinds of turn is what the MCP call costs beside a tool
round. Uses DATABASE_URL / PG_HOST like the application; without them, a temporary
embedded server. Timings are reported here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from bench.harness import fresh_schema, open_bench_pool, percentile, server
from src.config import Settings
from src.services.agent_service import Identity
from src.services.factory import build_runtime
from src.storage.mcp_calls_repo import McpCallRepository

ECHO = str(Path(__file__).resolve().parent / "mcp_echo.py")
CASES = ("no tool", "built-in tool", "MCP tool (stdio)")
OWNER = 7001


class ScriptedModel(GenericFakeChatModel):
    """Answers from a script at once; binding tools changes nothing."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def script(case: str, turns: int) -> Iterator[AIMessage]:
    """Yield the model's answers for `turns` turns of `case`."""
    for n in range(turns):
        if case == "built-in tool":
            call = {"name": "recall_previous_conversations", "args": {}, "id": f"r{n}"}
            yield AIMessage("", tool_calls=[call])
        elif case == "MCP tool (stdio)":
            call = {"name": "bench_echo", "args": {"text": f"ping {n}"}, "id": f"m{n}"}
            yield AIMessage("", tool_calls=[call])
        yield AIMessage(f"Answer {n}.")


async def run(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """Return (median, p95) milliseconds per turn by case, and of the MCP call alone."""
    results: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as folder, server() as (base, _label):
        config = Path(folder) / "mcp.json"
        servers = {"bench": {"command": sys.executable, "args": [ECHO], "allow": "allowed"}}
        config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
        for case in CASES:
            async with fresh_schema(base, "bench_mcp") as (dsn, _schema):
                pool = await open_bench_pool(dsn, 1, 4)
                model = ScriptedModel(messages=script(case, args.turns + args.warmup))
                settings = Settings(  # type: ignore[call-arg]
                    _env_file=None, mcp_config=config, embedding_provider="off"
                )
                memory = ScriptedModel(messages=itertools.repeat(AIMessage("[]")))
                runtime = await build_runtime(
                    settings, pool=pool, chat_model=model, summary_model=memory
                )
                try:
                    results[case] = await _turns(runtime, args)
                    if case == CASES[-1]:
                        results["MCP call alone"] = await _calls(runtime, args.turns)
                        results["MCP call's record"] = await _records(runtime, args.turns)
                finally:
                    await runtime.close()
                    await pool.close()
    return results


async def _turns(runtime: Any, args: argparse.Namespace) -> tuple[float, float]:
    identity = Identity(OWNER, "bench", "Bench", "en")
    times = []
    for n in range(args.warmup + args.turns):
        started = time.perf_counter()
        result = await runtime.service.handle_message(identity, f"message {n}")
        if n >= args.warmup:
            times.append((time.perf_counter() - started) * 1000)
        assert result.ok, result.reply
        await runtime.service.drain()
    return statistics.median(times), percentile(times, 0.95)


async def _calls(runtime: Any, n: int) -> tuple[float, float]:
    mcp = runtime.deps.mcp
    bench = mcp.servers.servers["bench"]
    times = []
    for i in range(n):
        started = time.perf_counter()
        text, ok, _, _ = await mcp.run(bench, "echo", {"text": f"ping {i}"}, {"user_id": OWNER})
        times.append((time.perf_counter() - started) * 1000)
        assert ok, text
    return statistics.median(times), percentile(times, 0.95)


async def _records(runtime: Any, n: int) -> tuple[float, float]:
    """Time what makes a call once: its row claimed before the call, finished after."""
    record = McpCallRepository(runtime.pool)
    async with runtime.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT id FROM messages WHERE owner_id = %s AND role = 'user' LIMIT 1", (OWNER,)
        )
        row = await cur.fetchone()
    assert row is not None
    times = []
    for i in range(n):
        started = time.perf_counter()
        claim = await record.claim(OWNER, row["id"], f"bench_echo:{i}:0", "bench", "echo")
        assert isinstance(claim, int)
        await record.finish(claim, "ok", 1.0, f"echo: ping {i}")
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), percentile(times, 0.95)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=100, help="timed turns per case")
    parser.add_argument("--warmup", type=int, default=5, help="untimed turns first")


def report(args: argparse.Namespace) -> int:
    """Print one Markdown table row per case."""
    results = asyncio.run(run(args))
    print(f"| {args.turns} turns each | median ms | p95 ms |")  # noqa: T201
    print("|---|---:|---:|")  # noqa: T201
    for case, (median, p95) in results.items():
        print(f"| {case} | {median:.2f} | {p95:.2f} |")  # noqa: T201
    return 0


async def _command(args: argparse.Namespace, settings: Settings) -> int:
    del settings
    for case, (median, p95) in (await run(args)).items():
        print(f"{case}: median {median:.2f} ms, p95 {p95:.2f} ms")  # noqa: T201
    return 0


def register(sub: Any) -> None:
    """Add `tgagent bench mcp [options]` to `tgagent bench`'s subcommands."""
    parser = sub.add_parser("mcp", help="what an MCP tool call adds to a turn", description=__doc__)
    add_arguments(parser)
    parser.set_defaults(handler=_command)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench mcp", description=__doc__)
    add_arguments(parser)
    return report(parser.parse_args(argv))
