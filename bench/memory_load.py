"""Memory under a user faster than the memory model: is every message in every request?

One user writes `--turns` messages (120; the issue's figure is 300), each `--think`
seconds (0.5) after the previous reply came back, without waiting for the memory work;
the memory model (summary, facts) answers in `--memory-seconds` (2). Four runs in
sequence, each in a fresh schema with a fresh runtime (`build_runtime`, the real
ChatOpenAI client against tests' FakeOpenAI): the default window and
WINDOW_STEP=`--step` (10), with short messages and with messages of `--long-chars`
(3,000) characters. For each it reports:

- messages missing from a request: for each chat request, the user messages sent so far
  that are neither in it nor in the summary it carries (tests/memory_ledger.py); must be 0;
- the memory model's calls: received by the server, answered, cancelled (the client went
  away while the model worked: aiohttp cancels the handler), and re-sent (a call that
  reads a user message an earlier call of the same kind read already);
- the prompt's prefix share: the share of each chat request's tokens that repeats the
  previous chat request's from its first byte (what a prompt cache reuses);
- reply latency (a turn may wait for the memory work before it: GIVE_WAY_AFTER).

    python -m bench memory [--turns 120] [--quick] [--out bench/results/memory.json]
    tgagent bench memory ...

Uses DATABASE_URL / PG_HOST like the application; without them, a temporary embedded
server. The four 120-turn runs take about 8 minutes, `--turns 300` about 20: a turn that
finds the memory work running waits GIVE_WAY_AFTER (1 s) for it, which the long
messages' runs do nearly every turn.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from pydantic import SecretStr

from bench.harness import fresh_schema, open_bench_pool, server, summary
from bench.memory_report import broken, render
from bench.model_server import REPLY
from bench.phases import USER_TEXTS
from bench.turns import log, write_text
from src.config import Settings
from src.graph.tokens import make_counter
from src.services.agent_service import Identity
from src.services.factory import Runtime, build_runtime
from src.services.turn_lock import GIVE_WAY_AFTER

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "memory.json"
QUIET_LOGGERS = ("httpx", "httpcore", "openai", "pgserver", "src")
MEMORY_MODEL = "memory-model"  # tests/fakes/memory_model.py's name, which the Ledger reads
USER = Identity(4_300_001, "bench", "Bench", "ru")

FULL = {"turns": 120, "memory_seconds": 2.0, "think": 0.5, "step": 10, "long_chars": 3_000}
QUICK = {"turns": 10, "memory_seconds": 0.05, "think": 0.05, "step": 10, "long_chars": 3_000}


def user_message(turn: int, chars: int) -> str:
    """Return turn `turn`'s message: its token `u<turn>`, then chat text up to `chars`."""
    head = f"u{turn} {USER_TEXTS[turn % len(USER_TEXTS)]}"
    if len(head) >= chars:
        return head
    body = " ".join(USER_TEXTS[(turn + i) % len(USER_TEXTS)] for i in range(1, 80))
    return f"{head} {body}"[:chars].rsplit(" ", 1)[0]


def chat_reply(numbers: Iterator[int]) -> Callable[[dict[str, Any]], str]:
    """Return the chat model: REPLY led by a number of its own, as real replies differ
    from their first words (the same text every turn would pass for a repeated prefix)."""
    return lambda request: f"Ответ {next(numbers)}. {REPLY}"


@dataclass
class MemoryModel:
    """The memory model: answers after `seconds` as the Ledger does (recording what each
    summary stands for), counting the calls it started, answered and had cancelled."""

    ledger: Any
    seconds: float
    started: int = 0
    answered: int = 0
    cancelled: int = 0

    async def __call__(self, request: dict[str, Any]) -> str:
        self.started += 1
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            # The server's handler is cancelled when the client's connection goes away.
            self.cancelled += 1
            raise
        self.answered += 1
        return str(self.ledger.reply(request))


class Warnings(logging.Handler):
    """Count the application's warnings and errors by message template."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[f"{record.levelname}: {record.msg}"] += 1


def bench_settings(base_url: str, step: int, overrides: dict[str, Any]) -> Settings:
    """Return the settings tests/conftest.py's make_settings builds (memory retries at
    their default), WINDOW_STEP=`step`."""
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        openai_base_url=base_url,
        openai_api_key=SecretStr("bench"),
        llm_max_retries=0,
        llm_timeout=10.0,
        summary_model=MEMORY_MODEL,
        embedding_provider="off",
        window_step=step,
        **overrides,
    )


def variants(cfg: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Return (name, WINDOW_STEP, message characters) of the four runs."""
    step, chars = cfg["step"], cfg["long_chars"]
    return [
        ("short, step 1", 1, 0),
        (f"short, step {step}", step, 0),
        (f"{chars:,} chars, step 1", 1, chars),
        (f"{chars:,} chars, step {step}", step, chars),
    ]


@contextlib.asynccontextmanager
async def opened(base_dsn: str, settings: Settings) -> AsyncIterator[Runtime]:
    """Yield the application's runtime over a fresh schema; close and drop both after."""
    async with fresh_schema(base_dsn, "bench_memory") as (dsn, _):
        pool = await open_bench_pool(dsn, settings.pg_pool_min, settings.pg_pool_max)
        try:
            rt = await build_runtime(settings, pool=pool)
            try:
                yield rt
            finally:
                await rt.close()
        finally:
            await pool.close()


async def play(rt: Runtime, cfg: dict[str, Any], chars: int) -> dict[str, Any]:
    """Send the turns, each `think` seconds after the previous reply came back, the
    memory work left running; then wait for it. Return latencies, failures, time."""
    latencies: list[float] = []
    failed: list[int] = []
    started = time.perf_counter()
    for turn in range(1, cfg["turns"] + 1):
        sent = time.perf_counter()
        result = await rt.service.handle_message(USER, user_message(turn, chars))
        latencies.append((time.perf_counter() - sent) * 1000)
        if not result.ok:
            failed.append(turn)
        await asyncio.sleep(cfg["think"])
    seconds = time.perf_counter() - started
    await rt.service.drain()
    return {
        "failed_turns": failed,
        "turns_seconds": round(seconds, 1),
        "reply_ms": summary(latencies),
        # Replies that waited for the memory work before them to give way.
        "replies_after_give_way": sum(ms >= 1000 * GIVE_WAY_AFTER for ms in latencies),
    }


async def run_variant(base_dsn: str, cfg: dict[str, Any], step: int, chars: int) -> dict[str, Any]:
    """Play one user's turns in a fresh schema; return what the requests show."""
    from bench import memory_audit
    from tests.fakes.openai_server import FakeOpenAI
    from tests.memory_ledger import Ledger

    ledger = Ledger()
    model = MemoryModel(ledger, cfg["memory_seconds"])
    warnings = Warnings()
    logging.getLogger("src").addHandler(warnings)
    started = time.perf_counter()
    try:
        with FakeOpenAI() as llm:
            llm.default_reply = chat_reply(itertools.count(1))
            llm.default_for(MEMORY_MODEL, model)
            settings = bench_settings(llm.base_url, step, cfg.get("settings", {}))
            async with opened(base_dsn, settings) as rt:
                played = await play(rt, cfg, chars)
            requests = list(llm.requests)
    finally:
        logging.getLogger("src").removeHandler(warnings)
    chat = [r for r in requests if r.get("model") == settings.llm_model]
    memory = [r for r in requests if r.get("model") == MEMORY_MODEL]
    counter = make_counter(settings.llm_model, settings.token_counter)
    return {
        "window_step": step,
        "message_chars": chars or None,
        "turns": cfg["turns"],
        **played,
        "seconds": round(time.perf_counter() - started, 1),
        "chat_requests": len(chat),
        "missing": memory_audit.missing(chat, ledger),
        "memory": {
            "received": len(memory),
            "started": model.started,
            "answered": model.answered,
            "cancelled": model.cancelled,
            **memory_audit.memory_calls(memory),
        },
        "prompt": memory_audit.prompts_shape(chat, counter),
        "warnings": dict(warnings.counts.most_common()),
    }


async def run(cfg: dict[str, Any], mode: str, dsn: str | None = None) -> dict[str, Any]:
    """Run the four variants in sequence; return their figures and the run's meta."""
    _importable_tests()
    started = time.perf_counter()
    figures: dict[str, Any] = {}
    with server(dsn) as (base_dsn, label):
        async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as conn:
            row = await (await conn.execute("SHOW server_version")).fetchone()
        for name, step, chars in variants(cfg):
            log(f"{name}: {cfg['turns']} turns ...")
            figures[name] = await run_variant(base_dsn, cfg, step, chars)
            log(f"  done in {figures[name]['seconds']} s")
    settings = bench_settings("http://127.0.0.1/v1", 1, cfg.get("settings", {}))
    return {
        "meta": {
            "mode": mode,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "database": label,
            "postgres": row[0] if row else "?",
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "counter": make_counter(settings.llm_model, settings.token_counter).name,
            "max_context": settings.max_context,
            "summary_trigger": settings.summary_trigger,
            "facts_every": settings.facts_every,
            "context_limit": settings.default_context_limit,
            "give_way_after": GIVE_WAY_AFTER,
            "memory_retry_seconds": settings.memory_retry_seconds,
            "config": cfg,
            "seconds": round(time.perf_counter() - started, 1),
        },
        "figures": figures,
    }


def config_from(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    cfg = dict(QUICK if args.quick else FULL)
    for key in ("turns", "memory_seconds", "think", "step", "long_chars"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    return cfg, "quick" if args.quick else "full"


async def run_and_report(args: argparse.Namespace) -> int:
    """Run, print the table, write the JSON; exit code 1 if a turn failed or a message
    was missing from a request."""
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    cfg, mode = config_from(args)
    result = await run(cfg, mode)
    print(render(result))
    text = json.dumps(result, indent=2, ensure_ascii=False) + "\n"
    await asyncio.to_thread(write_text, args.out, text)
    print(f"\nwritten to {args.out} in {result['meta']['seconds']} s")
    return 1 if broken(result) else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick", action="store_true", help="10 turns, a 0.05 s memory model (a smoke run)"
    )
    parser.add_argument("--turns", type=int, help="turns per variant (120)")
    parser.add_argument("--memory-seconds", type=float, help="memory model's answer time (2)")
    parser.add_argument("--think", type=float, help="seconds between a reply and the next (0.5)")
    parser.add_argument("--step", type=int, help="WINDOW_STEP of the stepped variants (10)")
    parser.add_argument("--long-chars", type=int, help="characters of a long message (3000)")
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})"
    )


async def _command(args: argparse.Namespace, settings: Any) -> int:
    return await run_and_report(args)


def register(sub: Any) -> None:
    """Add `tgagent bench memory [options]` to `tgagent bench`'s subcommands."""
    parser = sub.add_parser(
        "memory",
        help="every message in every request, with a memory model slower than the user",
        description=__doc__.splitlines()[0],
    )
    add_arguments(parser)
    parser.set_defaults(handler=_command)


def _importable_tests() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # tests.fakes lives in the source checkout


def main(argv: Sequence[str] | None = None) -> int:
    """Run the memory bench from the command line."""
    parser = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__)
    add_arguments(parser)
    return asyncio.run(run_and_report(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
