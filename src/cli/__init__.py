"""The `tgagent` command: bot, chat, db, graph, runs, replay, web, usage, bench, mcp.

One module per command group, each with `register(sub, db_sub)`: it adds its subparsers
(to `sub`, or under `tgagent db` to `db_sub`) and sets `handler=` on each leaf parser to
an async function `(args: argparse.Namespace, settings: Settings) -> int` (the exit code).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from src.cli.logging_setup import configure_logging
from src.config import ConfigError, Settings, load_settings
from src.storage.migrations import MigrationsMissing
from src.storage.pg_client import (
    DatabaseUnavailable,
    describe_dsn,
    reason_of,
)

logger = logging.getLogger(__name__)

Command = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser; each leaf parser sets `handler` to its command."""
    parser = argparse.ArgumentParser(prog="tgagent", description=__doc__)
    parser.add_argument("--log-level", default=None, help="override LOG_LEVEL")
    sub = parser.add_subparsers(dest="command", required=True)

    db_parser = sub.add_parser("db", help="database maintenance")
    # Their output is the report (one line per migration): logs only for warnings.
    db_parser.set_defaults(quiet_logs=True)
    db_sub = db_parser.add_subparsers(dest="db_command", required=True)

    # Imported here: each group loads what its commands need, not at `import src.cli`.
    from src.cli import bench, bot, chat, db, devtools, mcp, usage, web

    for group in (db, chat, bot, devtools, web, usage, bench, mcp):
        group.register(sub, db_sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `tgagent` command line and return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"tgagent: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    level = args.log_level or settings.log_level
    # Commands that talk on the terminal (chat, db) show warnings only, unless asked for
    # more with --log-level or LOG_LEVEL=DEBUG.
    if getattr(args, "quiet_logs", False) and not args.log_level and level.upper() != "DEBUG":
        level = "WARNING"
    configure_logging(level, settings)
    command: Command = args.handler
    try:
        return asyncio.run(command(args, settings))
    except (DatabaseUnavailable, ConfigError, MigrationsMissing) as exc:
        print(f"tgagent: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    except (psycopg.OperationalError, PoolTimeout) as exc:
        # The server went away after the first connection: still one line, no traceback.
        dsn = settings.server_dsn()
        where = describe_dsn(dsn) if dsn else f"the embedded server in {settings.tgagent_data_dir}"
        print(  # noqa: T201
            f"tgagent: lost the connection to PostgreSQL at {where}: {reason_of(exc, dsn or '')}",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        return 130
