"""A real `tgagent web` server for tests: the application on a free port of this
process's event loop, over the test's pool and settings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg_pool import AsyncConnectionPool

from src.config import Settings
from src.devtools.web.app import WebContext, listen, make_app
from src.devtools.web.auth import Guard


@asynccontextmanager
async def serving(
    pool: AsyncConnectionPool[Any],
    settings: Settings,
    host: str = "127.0.0.1",
    token: str | None = None,
) -> AsyncIterator[str]:
    """Serve the page on `host` (port 0: a free one); yield its loopback base URL."""
    guard = Guard.for_host(host, token)
    server, port = listen(make_app(WebContext.create(pool, settings, guard)), host, 0)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        await server.close_all_connections()
