"""Subcommands beyond `db`: each lives with its feature and is registered here."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any, commands: dict[str, Any]) -> None:
    """Add the feature subcommands to the parser and the command table."""
    del sub, commands, argparse
