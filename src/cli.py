"""The `tgagent` command: bot, chat, db, graph, runs, replay, web, usage, bench."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from src.config import ConfigError, Settings, load_settings
from src.logging_setup import configure_logging
from src.storage.migrations import (
    MigrationsMissing,
    applied_versions,
    migrate,
    require_migrations,
)
from src.storage.pg_client import (
    DatabaseUnavailable,
    describe_dsn,
    open_pool_from_settings,
    reason_of,
)

logger = logging.getLogger(__name__)

Command = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]


async def _db_migrate(args: argparse.Namespace, settings: Settings) -> int:
    require_migrations()  # before starting or touching any database
    pool = await open_pool_from_settings(settings)
    try:
        applied = await migrate(pool)
    finally:
        await pool.close()
    if applied:
        for name in applied:
            print(f"applied {name}")  # noqa: T201
    else:
        print("nothing to do: the database is up to date")  # noqa: T201
    return 0


async def _db_status(args: argparse.Namespace, settings: Settings) -> int:
    from src.storage.migrations import discover

    pool = await open_pool_from_settings(settings)
    try:
        rows = await applied_versions(pool)
    finally:
        await pool.close()
    done = {row["version"] for row in rows}
    for row in rows:
        when = f"{row['applied_at']:%Y-%m-%d %H:%M:%S}"
        print(f"{row['version']:04d}  applied  {when}  {row['name']}")  # noqa: T201
    for mig in discover():
        if mig.version not in done:
            print(f"{mig.version:04d}  pending  {'':19}  {mig.name}")  # noqa: T201
    return 0


async def _db_embed(args: argparse.Namespace, settings: Settings) -> int:
    from src.embeddings import make_embedder
    from src.services.embedding_worker import EmbeddingWorker
    from src.storage.embedding_repo import EmbeddingRepository

    embedder = make_embedder(settings)
    if embedder is None:
        print("EMBEDDING_PROVIDER=off: semantic search is disabled, nothing to embed")  # noqa: T201
        return 0
    pool = await open_pool_from_settings(settings)
    try:
        await migrate(pool)
        repo = EmbeddingRepository(pool)
        before = await repo.counts(embedder.model)
        print(  # noqa: T201
            f"{embedder.model}: {before['embedded']} embedded, {before['pending']} pending, "
            f"{before['other_models']} by another model"
        )
        if args.status:
            return 0
        worker = EmbeddingWorker(repo, embedder, settings.embedding_batch)
        while done := await worker.run_once():
            print(f"  {worker.embedded} embedded ({done} in the last batch)")  # noqa: T201
        after = await repo.counts(embedder.model)
    finally:
        await pool.close()
    print(f"done: {after['embedded']} embedded, {after['pending']} pending")  # noqa: T201
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser; each leaf parser sets `handler` to its command."""
    parser = argparse.ArgumentParser(prog="tgagent", description=__doc__)
    parser.add_argument("--log-level", default=None, help="override LOG_LEVEL")
    sub = parser.add_subparsers(dest="command", required=True)

    db = sub.add_parser("db", help="database maintenance")
    # Their output is the report (one line per migration): logs only for warnings.
    db.set_defaults(quiet_logs=True)
    db_sub = db.add_subparsers(dest="db_command", required=True)
    db_sub.add_parser("migrate", help="apply pending migrations").set_defaults(handler=_db_migrate)
    db_sub.add_parser("status", help="show applied and pending migrations").set_defaults(
        handler=_db_status
    )

    embed = db_sub.add_parser(
        "embed", help="embed every stored message that has no embedding yet (backfill)"
    )
    embed.add_argument("--status", action="store_true", help="only count, embed nothing")
    embed.set_defaults(handler=_db_embed)

    from src import cli_commands

    cli_commands.register(sub, db_sub)
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


if __name__ == "__main__":
    sys.exit(main())
