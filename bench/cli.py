"""`tgagent bench`: the turn bench (bench/turns.py) as a subcommand."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from src.config import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"


async def _bench(args: argparse.Namespace, settings: Settings) -> int:
    from bench.turns import run_and_report

    return await run_and_report(args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the bench's options to `parser` (shared by `tgagent bench` and `python -m bench`)."""
    parser.add_argument(
        "--quick", action="store_true", help="small numbers (~30 s), for smoke tests"
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})"
    )
    parser.add_argument("--turns", type=int, help="turns of the long conversation (300)")
    parser.add_argument("--conversations", type=int, help="concurrent conversations (100)")
    parser.add_argument(
        "--growth",
        type=lambda s: [int(x) for x in s.split(",")],
        help="stored messages, e.g. 1000,1000000",
    )
    parser.add_argument("--profile", type=Path, help="also profile tgagent's turns (.html or .txt)")


def register(sub: Any, db_sub: Any) -> None:
    """Add `tgagent bench [--quick] [--out PATH] ...` and its subcommands; `sub` makes
    `CommandParser`s (src/cli/__init__.py), so the benches, which import most of tgagent,
    are loaded only when `tgagent bench` is used."""
    del db_sub
    parser = sub.add_parser(
        "bench",
        help="measure per-turn cost against a plain LangGraph agent, and the other benches",
        description="Measure tgagent's per-turn overhead, database work, throughput, growth, "
        "token spend and checkpoint size, side by side with LangGraph's prebuilt ReAct agent; "
        "or run one of the other benches (`tgagent bench NAME --help`).",
        fill=_fill,
    )
    parser.set_defaults(handler=_bench)


def _fill(parser: argparse.ArgumentParser) -> None:
    """Add the turn bench's options and the other benches as subcommands."""
    add_arguments(parser)
    from bench import (
        budget,
        delivery,
        live,
        mcp_tools,
        media,
        memory_load,
        recall,
        startup,
        typed_lines,
    )

    sub = recall.register(parser)
    delivery.register(sub)
    live.register(sub)
    media.register(sub)
    memory_load.register(sub)
    budget.register(sub)
    startup.register(sub)
    mcp_tools.register(sub)
    typed_lines.register(sub)
