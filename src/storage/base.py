"""What every repository shares: the pool, an optional caller's connection, clean text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

Conn = AsyncConnection[Any]


def clean_text(text: str) -> str:
    """Return `text` storable in PostgreSQL: no NUL, no lone surrogates."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", errors="replace").decode("utf-8")
    return text


def clean_json(value: Any) -> Any:
    """Return `value` with every string in it (keys included) made storable by `clean_text`.

    JSON escapes hide NUL and lone surrogates from a scan of the serialized text
    (`"\\u0000"`), and PostgreSQL's jsonb rejects both, so each string is cleaned itself.
    """
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value


class Repository:
    """Base for repositories: SQL over the shared pool or a caller's transaction."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool

    @asynccontextmanager
    async def _conn(self, conn: Conn | None = None) -> AsyncIterator[Conn]:
        if conn is not None:
            yield conn
            return
        async with self.pool.connection() as own:
            yield own
