"""Subcommands beyond `db`: each feature registers its own from its own module."""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Each module has `register(sub, commands)`, adding its subparsers and the coroutine
# functions that run them (keyed "name" or "name.subname").
FEATURE_MODULES = (
    "src.terminal_chat",
    "src.bot.cli",
    "src.devtools.cli",
    "bench.cli",
)


def register(sub: Any, commands: dict[str, Any]) -> None:
    """Add every available feature's subcommands to the parser and the command table."""
    for name in FEATURE_MODULES:
        try:
            module = import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub, commands)
