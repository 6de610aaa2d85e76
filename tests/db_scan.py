"""Look for a string everywhere in the test's database schema.

Every base table of the schema, from the catalog: its text, varchar, char, json, jsonb,
tsvector and array columns as text, its bytea columns as bytes, each also
zlib-decompressed where it is compressed (checkpoint values: src/storage/checkpointer.py
stores long ones so, the type column saying `...+zlib`). Case is ignored.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from typing import Any

from psycopg import sql

COLUMNS = """
SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c
JOIN information_schema.tables t
  ON t.table_schema = c.table_schema AND t.table_name = c.table_name
WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
  AND c.data_type IN ('text', 'character varying', 'character', 'json', 'jsonb', 'bytea',
                      'tsvector', 'ARRAY', 'USER-DEFINED')
ORDER BY c.table_name, c.column_name
"""
CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def _forms(raw: bytes) -> list[bytes]:
    """Return the stored bytes, and what they decompress to if they are zlib's."""
    try:
        return [raw, zlib.decompress(raw)]
    except zlib.error:
        return [raw]


async def traces(pool: Any, needle: str, tables: tuple[str, ...] | None = None) -> list[str]:
    """Return `table.column` of every value in the schema (or in `tables`) that holds
    `needle`, ignoring case."""
    found: list[str] = []
    wanted = needle.lower().encode()
    async with pool.connection() as conn:
        columns = await (await conn.execute(COLUMNS)).fetchall()
        for col in columns:
            table, column = col["table_name"], col["column_name"]
            if tables is not None and table not in tables:
                continue
            binary = col["data_type"] == "bytea"
            cast = "{}" if binary else "{}::text"
            query = sql.SQL("SELECT " + cast + " AS v FROM {} WHERE {} IS NOT NULL").format(
                sql.Identifier(column), sql.Identifier(table), sql.Identifier(column)
            )
            for row in await (await conn.execute(query)).fetchall():
                value = row["v"]
                forms = _forms(bytes(value)) if binary else [str(value).encode()]
                if any(wanted in form.lower() for form in forms):
                    found.append(f"{table}.{column}")
    return found


async def values(pool: Any) -> AsyncIterator[tuple[str, str]]:
    """Yield (`table.column`, text) of every value in the schema: text as it is, bytea
    (decompressed where it is zlib's) decoded as UTF-8, unreadable bytes replaced."""
    async with pool.connection() as conn:
        columns = await (await conn.execute(COLUMNS)).fetchall()
        for col in columns:
            table, column = col["table_name"], col["column_name"]
            binary = col["data_type"] == "bytea"
            cast = "{}" if binary else "{}::text"
            query = sql.SQL("SELECT " + cast + " AS v FROM {} WHERE {} IS NOT NULL").format(
                sql.Identifier(column), sql.Identifier(table), sql.Identifier(column)
            )
            for row in await (await conn.execute(query)).fetchall():
                value = row["v"]
                if not binary:
                    yield f"{table}.{column}", str(value)
                    continue
                for form in _forms(bytes(value)):
                    yield f"{table}.{column}", form.decode("utf-8", errors="replace")


async def in_checkpoints(pool: Any, needle: str) -> list[str]:
    """Return where the checkpoint tables (values decompressed) hold `needle`."""
    return await traces(pool, needle, CHECKPOINT_TABLES)
