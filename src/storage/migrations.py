"""Apply the numbered SQL files in order, once each, under an advisory lock.

The files live in the top-level `sql/`, which every install (wheel or editable) carries
as the package `src.storage.sql` (pyproject.toml maps the directory there), so an
installed wheel migrates as a source checkout does. The job queue's schema is
procrastinate's own (`procrastinate/sql/schema.sql`, read from the installed package) and
runs as migration 0011, between our files.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool

logger = logging.getLogger(__name__)


def _installed_sql_dir() -> Path:
    """Return the directory the migrations are installed in (`src.storage.sql`)."""
    try:
        return Path(str(resources.files("src.storage.sql")))
    except ModuleNotFoundError:
        # A checkout on PYTHONPATH without `pip install`: the files are where they live.
        return Path(__file__).resolve().parents[2] / "sql"


SQL_DIR = _installed_sql_dir()
_NAME = re.compile(r"^(\d{4})_[\w-]+\.sql$")
# Arbitrary constant shared by every process that migrates this database.
MIGRATION_LOCK_KEY = 7_140_001

CREATE_VERSIONS = """
CREATE TABLE IF NOT EXISTS schema_versions (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""
SELECT_APPLIED = "SELECT version, name, applied_at FROM schema_versions ORDER BY version"
INSERT_VERSION = "INSERT INTO schema_versions (version, name) VALUES (%s, %s)"
LOCK = "SELECT pg_advisory_xact_lock(%s)"


class MigrationsMissing(RuntimeError):
    """No migration file was found: the package is installed without its SQL files."""


@dataclass(frozen=True)
class Migration:
    """One numbered SQL file, or a schema another package ships (`path` None)."""

    version: int
    name: str
    path: Path | None

    def sql(self) -> str:
        """Return the migration's SQL text."""
        if self.path is None:
            return procrastinate_schema()
        return self.path.read_text(encoding="utf-8")


# The job queue (procrastinate, pinned to one minor version in pyproject.toml: its schema
# and its migrations between versions are its own). A later upgrade adds a numbered file
# with procrastinate's migrations for the versions in between.
QUEUE_SCHEMA = Migration(11, "0011_procrastinate_schema", None)


def procrastinate_schema() -> str:
    """Return the job queue's schema, as the installed procrastinate ships it."""
    from procrastinate.schema import SchemaManager

    return str(SchemaManager.get_schema())


def discover(sql_dir: Path | None = None) -> list[Migration]:
    """Return the migrations in `sql_dir` (default SQL_DIR), ordered, refusing duplicates."""
    sql_dir = sql_dir or SQL_DIR
    found: dict[int, Migration] = {}
    for path in sorted(sql_dir.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            continue
        version = int(match.group(1))
        if version in found:
            raise RuntimeError(f"two migrations numbered {version:04d} in {sql_dir}")
        found[version] = Migration(version, path.name, path)
    if found and QUEUE_SCHEMA.version not in found:
        found[QUEUE_SCHEMA.version] = QUEUE_SCHEMA
    return [found[v] for v in sorted(found)]


async def applied_versions(pool: AsyncConnectionPool[Any]) -> list[dict[str, Any]]:
    """Return the applied versions with their names and times."""
    async with pool.connection() as conn:
        await conn.execute(CREATE_VERSIONS)
        cur = await conn.execute(SELECT_APPLIED)
        return list(await cur.fetchall())


def require_migrations(sql_dir: Path | None = None) -> list[Migration]:
    """Return the migrations, refusing an empty set: it would leave a database unusable."""
    migrations = discover(sql_dir)
    if not migrations:
        where = sql_dir or SQL_DIR
        raise MigrationsMissing(
            f"no migrations found in {where}: reinstall tgagent (its SQL files are missing)"
        )
    return migrations


async def migrate(pool: AsyncConnectionPool[Any], sql_dir: Path | None = None) -> list[str]:
    """Apply every pending migration; return the names applied (empty: nothing to do)."""
    # The files are listed and read in a thread: never a blocking call on the event loop
    # (LangGraph's dev server refuses them, and a bot's other turns would wait).
    migrations = await asyncio.to_thread(require_migrations, sql_dir)
    applied: list[str] = []
    async with pool.connection() as conn:
        async with conn.transaction():
            # One transaction holds the lock, so two starting processes take turns and
            # the second sees the first one's versions.
            await conn.execute(LOCK, (MIGRATION_LOCK_KEY,))
            await conn.execute(CREATE_VERSIONS)
            cur = await conn.execute(SELECT_APPLIED)
            done = {row["version"] for row in await cur.fetchall()}
            for mig in migrations:
                if mig.version in done:
                    continue
                sql = await asyncio.to_thread(mig.sql)
                async with conn.transaction():
                    await conn.execute(sql.encode(), prepare=False)
                    await conn.execute(INSERT_VERSION, (mig.version, mig.name))
                applied.append(mig.name)
                logger.info("applied migration %s", mig.name)
    return applied
