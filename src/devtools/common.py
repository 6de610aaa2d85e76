"""What the devtools commands share: errors with exit codes, the database, short text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg_pool import AsyncConnectionPool

from src.config import Settings
from src.storage.pg_client import open_pool_from_settings

EXIT_BAD_INPUT = 1
"""Unknown thread or checkpoint, nothing to replay, a replay that failed."""
EXIT_ENVIRONMENT = 2
"""The database has no checkpoints yet, no PNG renderer, no database (as `tgagent` itself)."""
EXIT_INCOMPATIBLE = 3
"""A checkpoint the current graph cannot read or run (written by another graph version)."""

CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
SELECT_MISSING_TABLES = "SELECT t AS name FROM unnest(%s::text[]) AS t WHERE to_regclass(t) IS NULL"


class DevtoolsError(Exception):
    """A problem the developer can fix; the message says how, `code` is the exit code."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


@asynccontextmanager
async def opened_pool(settings: Settings) -> AsyncIterator[AsyncConnectionPool[Any]]:
    """Open the configured database's pool for one command and close it afterwards."""
    pool = await open_pool_from_settings(settings)
    try:
        yield pool
    finally:
        await pool.close()


async def missing_tables(pool: AsyncConnectionPool[Any], names: tuple[str, ...]) -> list[str]:
    """Return which of the tables `names` do not exist on the search path."""
    async with pool.connection() as conn:
        cur = await conn.execute(SELECT_MISSING_TABLES, (list(names),))
        return [row["name"] for row in await cur.fetchall()]


async def require_checkpoint_tables(pool: AsyncConnectionPool[Any]) -> None:
    """Fail with a clear message when LangGraph's checkpoint tables were never created."""
    missing = await missing_tables(pool, CHECKPOINT_TABLES)
    if missing:
        raise DevtoolsError(
            "this database has no LangGraph checkpoint tables (missing: "
            + ", ".join(missing)
            + "). They are created when `tgagent bot` or `tgagent chat` starts, and runs "
            "appear once a turn has been answered. Check DATABASE_URL points at the bot's "
            "database.",
            EXIT_ENVIRONMENT,
        )


def shorten(text: Any, width: int = 60) -> str:
    """Return `text` on one line, cut to `width` characters with an ellipsis."""
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: max(1, width - 1)] + "…"
