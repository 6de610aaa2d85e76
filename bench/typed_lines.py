"""Lines typed at once into `tgagent chat` on a one-slot model server: `python -m bench typed`.

Plays the first hour with a small local model: a server that answers one request at a
time and writes slowly until its cap (tests' FakeOpenAI with `slots = 1` and
`token_seconds`, in this process), replies capped at `LLM_MAX_OUTPUT_TOKENS=48`, folds and
facts due every few lines, and 25 lines piped at once into `tgagent chat` (a new process,
on a fresh schema). Reported per MEMORY_WAITS_FOR_REPLIES mode (`auto` waits for idle
time on a local server; `never` is how memory work went before): the time from the
first line's request to the last answer, the time until the chat has ended (the memory
work after the answers done), and the model requests served before the last answer that
were memory work. Timings are reported here, never asserted in tests.

    python -m bench typed [--lines 25] [--token-seconds 0.01] [--modes auto,never]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import fresh_schema, server
from bench.model_server import ROOT
from tests.fakes.memory_model import MEMORY_MODEL, memory_reply
from tests.fakes.openai_server import FakeOpenAI

CHAT_MODEL = "bench-chat"
LONG = " ".join(f"word{i}" for i in range(400))  # a small model that never stops


def _environment(dsn: str, base_url: str, mode: str) -> dict[str, str]:
    keep = ("PATH", "HOME", "TMPDIR", "LD_LIBRARY_PATH")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    return env | {
        "PYTHONPATH": str(ROOT),
        "LANG": "C.UTF-8",
        "DATABASE_URL": dsn,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "bench",
        "LLM_MODEL": CHAT_MODEL,
        "SUMMARY_MODEL": MEMORY_MODEL,
        "LLM_MAX_OUTPUT_TOKENS": "48",
        "MAX_CONTEXT": "12",
        "FACTS_EVERY": "2",
        "EMBEDDING_PROVIDER": "off",
        "MEMORY_WAITS_FOR_REPLIES": mode,
    }


def run_chat(fake: FakeOpenAI, env: dict[str, str], lines: int, cwd: Path) -> dict[str, Any]:
    """Pipe `lines` lines into `tgagent chat`; return its timings and the served order."""
    typed = "".join(f"My item{i} is thing{i}. Tell me about line {i}.\n" for i in range(lines))
    fake.clear()
    fake.default_for(CHAT_MODEL, LONG)
    fake.default_for(MEMORY_MODEL, memory_reply)
    started = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "src.cli", "chat", "--lang", "en"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(typed)
    proc.stdin.close()
    answered = 0
    last_answer = None
    for _ in proc.stdout:
        answered += 1
        last_answer = time.time()
    proc.wait(3600)
    ended = time.time()
    if proc.returncode != 0 or answered != lines or last_answer is None:
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"tgagent chat exited {proc.returncode}, {answered} answers: {err}")
    served = [fake.requests[i]["model"] for i in fake.served]
    last_reply = max(i for i, m in enumerate(served) if m == CHAT_MODEL)
    first_request = min(t["arrived"] or ended for t in fake.request_times)
    return {
        "answers": (last_answer - first_request),
        "ended": ended - first_request,
        "start": first_request - started,
        "memory_before_last_answer": served[:last_reply].count(MEMORY_MODEL),
        "memory_calls": served.count(MEMORY_MODEL),
        "replies": served.count(CHAT_MODEL),
    }


async def run(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Return the figures per mode."""
    results: dict[str, dict[str, Any]] = {}
    fake = FakeOpenAI()
    fake.slots = 1
    fake.token_seconds = args.token_seconds
    with fake, server() as (base, _label), tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            async with fresh_schema(base, "bench_typed") as (dsn, _schema):
                env = _environment(dsn, fake.base_url, mode)
                results[mode] = await asyncio.to_thread(run_chat, fake, env, args.lines, Path(tmp))
    return results


def render(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    """Return the report: one line per mode."""
    lines = [
        f"{args.lines} lines typed at once into tgagent chat; one-slot server writing "
        f"{args.token_seconds * 1000:.0f} ms a token, replies capped at 48 tokens",
        f"mode    {args.lines} answers   chat ended   memory calls (before the last answer)"
        "   replies",
    ]
    for mode, r in results.items():
        lines.append(
            f"{mode:<7} {r['answers']:>8.1f} s   {r['ended']:>8.1f} s   "
            f"{r['memory_calls']:>5} ({r['memory_before_last_answer']})"
            f"{'':<27}{r['replies']}"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lines", type=int, default=25, help="lines typed at once (25)")
    parser.add_argument("--token-seconds", type=float, default=0.01, help="seconds a token (0.01)")
    parser.add_argument("--modes", default="auto,never", help="MEMORY_WAITS_FOR_REPLIES modes")


async def _command(args: argparse.Namespace, settings: Any) -> int:
    print(render(await run(args), args))  # noqa: T201
    return 0


def register(sub: Any) -> None:
    """Add `tgagent bench typed [options]` to `tgagent bench`'s subcommands."""
    parser = sub.add_parser(
        "typed",
        help="lines typed at once into `tgagent chat` on a one-slot model server",
        description=__doc__.splitlines()[0],
    )
    add_arguments(parser)
    parser.set_defaults(handler=_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the typed-lines bench from the command line."""
    parser = argparse.ArgumentParser(prog="python -m bench typed", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    print(render(asyncio.run(run(args)), args))  # noqa: T201
    return 0
