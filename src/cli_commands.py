"""Subcommands beyond `db`: each feature registers its own from its own module."""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Each module has `register(sub, db_sub)`: it adds its subparsers (to `sub`, or under
# `tgagent db` to `db_sub`) and sets `handler=` on each leaf parser to an async function
# `(args: argparse.Namespace, settings: Settings) -> int` (the exit code).
FEATURE_MODULES = (
    "src.terminal_chat",
    "src.bot.cli",
    "src.devtools.cli",
    "bench.cli",
)


def register(sub: Any, db_sub: Any) -> None:
    """Add every available feature's subcommands to the parser and the command table."""
    for name in FEATURE_MODULES:
        try:
            module = import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not name.startswith(exc.name):
                raise
            continue
        module.register(sub, db_sub)
