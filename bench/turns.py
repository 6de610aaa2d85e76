"""Measure tgagent's per-turn cost side by side with a plain LangGraph agent.

Drives the real stack (AgentService, the graph, PostgreSQL with AsyncPostgresSaver,
ChatOpenAI over HTTP) against a local OpenAI-compatible server that answers instantly
with a ~400-character reply, and LangGraph's prebuilt ReAct agent on the same servers.
Every phase runs in a fresh schema, dropped afterwards.

    tgagent bench [--quick] [--out bench/results/latest.json]
    python -m bench turns [--quick] [--profile profile.html]

Uses DATABASE_URL / PG_HOST like the application; without them, a temporary embedded
server. Timings are reported here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench import phases
from bench.cli import add_arguments
from bench.harness import server
from bench.model_server import REPLY, ModelServerProcess
from bench.report import render, targets
from bench.subjects import Baseline, Ours
from src.config import Settings
from src.graph.context.budget import Layers
from src.graph.tokens import make_counter

MARKS = (10, 50, 100, 300)
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "pgserver", "src")

FULL = {
    "turns": 300,
    "db_warm": 16,
    "db_turns": 20,
    "conversations": 100,
    "load_seconds": 10.0,
    "load_seeded": 40,
    "growth": [1_000, 1_000_000],
    "baseline_growth": [1_000, 10_000],
    "growth_turns": 15,
    # The baseline's turns at 10,000 messages take seconds each; a few show the trend.
    "baseline_growth_turns": 6,
}
QUICK = {
    "turns": 30,
    "db_warm": 16,
    "db_turns": 5,
    "conversations": 10,
    "load_seconds": 2.0,
    "load_seeded": 40,
    "growth": [1_000, 5_000],
    "baseline_growth": [1_000, 2_000],
    "growth_turns": 4,
    "baseline_growth_turns": 3,
}


def bench_settings(base_url: str) -> Settings:
    """Return the application's defaults pointed at the bench model server."""
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        openai_base_url=base_url,
        openai_api_key="bench",
        llm_max_retries=0,
        llm_timeout=30.0,
        # A separate name tells the summarizer's requests apart from the chat model's.
        summary_model="bench-summary",
        compact_model="bench-summary",
    )


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path`, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def run_subject(
    env: phases.Env, name: str, opener: Any, cfg: dict[str, Any]
) -> dict[str, Any]:
    """Run every phase but the long conversation for one subject."""
    sizes = cfg["growth"] if name == "ours" else cfg["baseline_growth"]
    growth_turns = cfg["growth_turns"] if name == "ours" else cfg["baseline_growth_turns"]
    out: dict[str, Any] = {}
    log(f"{name}:")
    out["db"] = await phases.timed(
        "database accounting",
        phases.db_accounting(env, opener, cfg["db_warm"], cfg["db_turns"]),
        log,
    )
    out["load"] = await phases.timed(
        "throughput",
        phases.throughput(
            env, opener, cfg["conversations"], cfg["load_seconds"], cfg["load_seeded"]
        ),
        log,
    )
    out["growth"] = await phases.timed(
        "growth", phases.growth(env, opener, sizes, growth_turns), log
    )
    return out


async def run(
    cfg: dict[str, Any], mode: str, profile: Path | None = None, dsn: str | None = None
) -> dict[str, Any]:
    """Run the whole bench and return its result (figures, meta, targets).

    `dsn` names the PostgreSQL server to use; without it, the application's settings
    decide (DATABASE_URL / PG_HOST, else a temporary embedded server).
    """
    with server(dsn) as (base_dsn, label), ModelServerProcess() as model_server:
        async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as conn:
            row = await (await conn.execute("SHOW server_version")).fetchone()
        settings = bench_settings(model_server.base_url)
        counter = make_counter(settings.llm_model, settings.token_counter)
        env = phases.Env(
            base_dsn, settings, model_server, counter, settings.pg_pool_min, settings.pg_pool_max
        )

        async def open_ours(s: Settings, pool: Any) -> Ours:
            return await Ours.open(s, pool)

        async def open_base(s: Settings, pool: Any) -> Baseline:
            return await Baseline.open(s, pool, counter)

        started = time.perf_counter()
        try:
            if profile is not None:
                await profile_ours(env, open_ours, cfg, profile)
            marks = [m for m in MARKS if m < cfg["turns"]] + [cfg["turns"]]
            long = await phases.timed(
                f"{cfg['turns']}-turn conversations, side by side",
                phases.long_conversations(
                    env, {"ours": open_ours, "baseline": open_base}, cfg["turns"], marks
                ),
                log,
            )
            figures = {
                "ours": {"long": long["ours"], **await run_subject(env, "ours", open_ours, cfg)},
                "baseline": {
                    "long": long["baseline"],
                    **await run_subject(env, "baseline", open_base, cfg),
                },
            }
        finally:
            await model_server.aclose()
        elapsed = time.perf_counter() - started
    result = {
        "meta": {
            "mode": mode,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "database": label,
            "postgres": row[0] if row else "?",
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "reply_chars": len(REPLY),
            "counter": counter.name,
            "max_context": settings.max_context,
            "input_budget": Layers.for_model(settings, settings.llm_model).total,
            "pool": [settings.pg_pool_min, settings.pg_pool_max],
            "config": cfg,
            "seconds": round(elapsed, 1),
        },
        "figures": figures,
    }
    result["targets"] = targets(result)
    return result


async def profile_ours(env: phases.Env, opener: Any, cfg: dict[str, Any], out: Path) -> None:
    """Profile tgagent's turns (pyinstrument) in a conversation whose window is full."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        raise SystemExit("--profile needs pyinstrument: pip install pyinstrument") from None
    turns = max(60, cfg["db_warm"] + cfg["db_turns"])
    async with phases.opened(env, opener, "bench_prof") as (subject, _):
        for k in range(1, 21):
            await phases.measured_turn(env, subject, 1, phases.user_text(k))
        profiler = Profiler(interval=0.0002, async_mode="enabled")
        with profiler:
            for k in range(21, 21 + turns):
                await phases.measured_turn(env, subject, 1, phases.user_text(k))
    if out.suffix == ".html":
        text = profiler.output_html()
    else:
        text = profiler.output_text(unicode=True, show_all=False)
    await asyncio.to_thread(write_text, out, text)
    log(f"profile of {turns} turns written to {out}")


def parse(argv: Sequence[str] | None, prog: str = "python -m bench turns") -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    add_arguments(parser)
    return parser.parse_args(argv)


def config_from(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    cfg = dict(QUICK if args.quick else FULL)
    if args.turns:
        cfg["turns"] = args.turns
    if args.conversations:
        cfg["conversations"] = args.conversations
    if args.growth:
        cfg["growth"] = args.growth
    return cfg, "quick" if args.quick else "full"


async def run_and_report(args: argparse.Namespace) -> int:
    """Run, print the tables, write the JSON; exit code 1 if a turn failed or was lost."""
    # A line per request and per turn would bury the tables; warnings still show.
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    cfg, mode = config_from(args)
    result = await run(cfg, mode, args.profile)
    print(render(result))
    await asyncio.to_thread(
        write_text, args.out, json.dumps(result, indent=2, ensure_ascii=False) + "\n"
    )
    print(f"\nwritten to {args.out} in {result['meta']['seconds']} s")
    ours = result["figures"]["ours"]
    broken = ours["load"]["lost_messages"] or ours["load"]["failed_turns"] or ours["long"]["failed"]
    return 1 if broken else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the turn bench from the command line."""
    return asyncio.run(run_and_report(parse(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
