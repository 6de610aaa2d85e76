"""The `tgagent` command: bot, chat, db, graph, runs, replay, web, usage, bench, mcp.

One module per command group, each with `register(sub, db_sub)`: it adds its subparsers
(to `sub`, or under `tgagent db` to `db_sub`; both make `CommandParser`s) and sets
`handler=` on each leaf parser to an async function
`(args: argparse.Namespace, settings: Settings) -> int` (the exit code). Setting up the
parser imports no library a command uses (LangChain, LangGraph, psycopg,
python-telegram-bot...): a command imports them when it runs, so `--help` answers at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from src.config import Settings

logger = logging.getLogger(__name__)

DESCRIPTION = (
    "A Telegram assistant with real memory (LangGraph over PostgreSQL): run the bot, chat "
    "with it in the terminal, look after its database, look into its past turns."
)
EPILOG = (
    "Settings come from the environment and from .env in the working directory (every "
    "variable is listed in .env.example). `tgagent COMMAND --help` shows a command's options."
)

Command = Callable[[argparse.Namespace, "Settings"], Coroutine[Any, Any, int]]


class CommandParser(argparse.ArgumentParser):
    """An argument parser that may add its arguments when it is first used: `fill`, a
    function of the parser, runs before it parses or shows its help. A command whose
    options are defined beside heavy code (`tgagent bench`) then costs `tgagent --help`
    nothing."""

    def __init__(
        self, *args: Any, fill: Callable[[argparse.ArgumentParser], None] | None = None, **kw: Any
    ) -> None:
        super().__init__(*args, **kw)
        self._fill = fill

    def _filled(self) -> None:
        fill, self._fill = self._fill, None
        if fill is not None:
            fill(self)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._filled()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._filled()
        return super().format_usage()

    def format_help(self) -> str:
        self._filled()
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser; each leaf parser sets `handler` to its command."""
    parser = argparse.ArgumentParser(prog="tgagent", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--log-level", default=None, help="override LOG_LEVEL")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)

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
    from src.cli.logging_setup import configure_logging
    from src.config import ConfigError, load_settings

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
    import asyncio

    try:
        return asyncio.run(command(args, settings))
    except ConfigError as exc:
        print(f"tgagent: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    except Exception as exc:
        if _said_database_error(exc, settings):
            return 2
        raise
    except KeyboardInterrupt:
        return 130


def _said_database_error(exc: Exception, settings: Settings) -> bool:
    """Say in one line on stderr that the database is missing, unmigrated or gone, and
    return True; False for any other error."""
    # Imported only now: a command that never touched the database has not loaded psycopg.
    import psycopg
    from psycopg_pool import PoolTimeout

    from src.storage.migrations import MigrationsMissing
    from src.storage.pg_client import DatabaseUnavailable, describe_dsn, reason_of

    if isinstance(exc, (DatabaseUnavailable, MigrationsMissing)):
        print(f"tgagent: {exc}", file=sys.stderr)  # noqa: T201
        return True
    if isinstance(exc, (psycopg.OperationalError, PoolTimeout)):
        # The server went away after the first connection: still one line, no traceback.
        dsn = settings.server_dsn()
        where = describe_dsn(dsn) if dsn else f"the embedded server in {settings.tgagent_data_dir}"
        print(  # noqa: T201
            f"tgagent: lost the connection to PostgreSQL at {where}: {reason_of(exc, dsn or '')}",
            file=sys.stderr,
        )
        return True
    return False
