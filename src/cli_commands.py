"""Subcommands beyond `db`: each feature registers its own from its own module."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

from src.config import Settings

# Each module has `register(sub, db_sub)`: it adds its subparsers (to `sub`, or under
# `tgagent db` to `db_sub`) and sets `handler=` on each leaf parser to an async function
# `(args: argparse.Namespace, settings: Settings) -> int` (the exit code).
FEATURE_MODULES = (
    "src.terminal_chat",
    "src.bot.cli",
    "src.devtools.cli",
    "src.devtools.web.cli",
    "src.usage_cli",
    "bench.cli",
)
# `bench` is not installed with the package: it runs from the source checkout, which is
# where `src` lives when tgagent is installed with `pip install -e .`.
CHECKOUT = Path(__file__).resolve().parents[1]
BENCH_MISSING = (
    "`bench` needs the source checkout (bench/ is not installed with the package): "
    "clone the repository, `pip install -e '.[dev]'` there and run it again"
)


def _load(name: str) -> ModuleType | None:
    try:
        return import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not name.startswith(exc.name):
            raise
    top = name.partition(".")[0]
    if top == "bench" and (CHECKOUT / "bench" / "__init__.py").is_file():
        sys.path.append(str(CHECKOUT))
        return import_module(name)
    return None


async def _bench_missing(args: argparse.Namespace, settings: Settings) -> int:
    del args, settings
    print(f"tgagent: {BENCH_MISSING}", file=sys.stderr)  # noqa: T201
    return 2


def register(sub: Any, db_sub: Any) -> None:
    """Add every available feature's subcommands to the parser and the command table."""
    for name in FEATURE_MODULES:
        module = _load(name)
        if module is not None:
            module.register(sub, db_sub)
        elif name == "bench.cli":
            # No option prefix: every argument (`--quick` too) is taken, so the one line
            # below is what the user sees, not a usage error about options.
            parser = sub.add_parser(
                "bench", help="benchmarks (source checkout only)", prefix_chars="\x00"
            )
            parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
            parser.set_defaults(handler=_bench_missing)
