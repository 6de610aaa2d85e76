"""`tgagent bench`: bench/cli.py from the source checkout, or one line saying it is needed."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from src.config import Settings

# `bench` is not installed with the package: it runs from the source checkout, which is
# where `src` lives when tgagent is installed with `pip install -e .`.
CHECKOUT = Path(__file__).resolve().parents[2]
BENCH_MISSING = (
    "`bench` needs the source checkout (bench/ is not installed with the package): "
    "clone the repository, `pip install -e '.[dev]'` there and run it again"
)


def _load() -> ModuleType | None:
    """Return `bench.cli`, from the checkout beside `src` if needed; None without one."""
    try:
        return import_module("bench.cli")
    except ModuleNotFoundError as exc:
        if exc.name is None or not "bench.cli".startswith(exc.name):
            raise
    if (CHECKOUT / "bench" / "__init__.py").is_file():
        sys.path.append(str(CHECKOUT))
        return import_module("bench.cli")
    return None


async def _bench_missing(args: argparse.Namespace, settings: Settings) -> int:
    del args, settings
    print(f"tgagent: {BENCH_MISSING}", file=sys.stderr)  # noqa: T201
    return 2


def register(sub: Any, db_sub: Any) -> None:
    """Add `tgagent bench` (bench/cli.py's), or a `bench` that says what it needs."""
    module = _load()
    if module is not None:
        module.register(sub, db_sub)
        return
    # No option prefix: every argument (`--quick` too) is taken, so the one line below
    # is what the user sees, not a usage error about options.
    parser = sub.add_parser("bench", help="benchmarks (source checkout only)", prefix_chars="\x00")
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    parser.set_defaults(handler=_bench_missing)
