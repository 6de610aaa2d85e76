"""Shared fixtures: a real PostgreSQL (configured or embedded) and a fresh schema per test."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from src.config import Settings
from src.services.factory import Runtime, build_runtime
from src.storage.migrations import migrate
from src.storage.pg_client import make_pool
from tests.fakes.memory_model import MEMORY_MODEL, memory_reply
from tests.fakes.openai_server import FakeOpenAI

E2E = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the quick loop (`pytest -m quick`: the unit and integration tests that are not
    slow), then run the slow tests first: spread over the workers early, they end with
    the rest instead of after it (the longest takes minutes alone)."""
    for item in items:
        if item.get_closest_marker("slow") is None and E2E not in item.path.parents:
            item.add_marker(pytest.mark.quick)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _configured_dsn() -> str | None:
    return os.environ.get("TEST_DATABASE_URL") or os.environ.get("DATABASE_URL") or None


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """Return the DSN of the test server: TEST_DATABASE_URL/DATABASE_URL, else embedded."""
    dsn = _configured_dsn()
    if dsn:
        yield dsn
        return
    import pgserver

    # Short path: the server's unix socket lives in its data directory.
    with tempfile.TemporaryDirectory(prefix="tga-", dir="/tmp") as tmp:
        server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="stop")
        yield str(server.get_uri())
        server.cleanup()


@pytest.fixture
def private_server() -> Iterator[Any]:
    """Start a throwaway embedded cluster a test may stop or restart (never the shared
    server)."""
    import pgserver

    with tempfile.TemporaryDirectory(prefix="tgr-", dir="/tmp") as tmp:
        server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="stop")
        yield server
        server.cleanup()


def schema_dsn(dsn: str, schema: str) -> str:
    """Return `dsn` with its search_path set to `schema`."""
    return psycopg.conninfo.make_conninfo(dsn, options=f"-c search_path={schema}")


class MigratedTemplates:
    """Databases cloned from one migrated template: a test's database in a tenth of a second.

    Migrating a fresh schema costs about half a second per test; `CREATE DATABASE ...
    TEMPLATE` copies a migrated one at a fraction of that. A server whose role may not
    create databases gets migrated schemas instead (`available` is False).
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.name = f"tga_tpl_{uuid.uuid4().hex[:12]}"
        self.available: bool | None = None

    def dsn_of(self, dbname: str) -> str:
        """Return the server's DSN naming database `dbname`."""
        return psycopg.conninfo.make_conninfo(self.dsn, dbname=dbname)

    async def _admin(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)

    async def _build(self) -> None:
        try:
            async with await self._admin() as conn:
                await conn.execute(f'CREATE DATABASE "{self.name}"')
        except psycopg.errors.InsufficientPrivilege:
            self.available = False
            return
        p = make_pool(self.dsn_of(self.name), 1, 2)
        await p.open()
        try:
            await p.wait(timeout=10)
            await migrate(p)
        finally:
            await p.close()
        self.available = True

    async def clone(self) -> str | None:
        """Create a migrated database for one test; return its name (None: not possible)."""
        if self.available is None:
            await self._build()
        if not self.available:
            return None
        name = f"t_{uuid.uuid4().hex[:12]}"
        async with await self._admin() as conn:
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.name}"')
        return name

    async def drop(self, name: str) -> None:
        """Drop a database, ending any connection a test left open to it."""
        async with await self._admin() as conn:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def templates(pg_dsn: str) -> Iterator[MigratedTemplates]:
    """Hold the session's migrated template database (built at its first use)."""
    tpl = MigratedTemplates(pg_dsn)
    yield tpl
    if tpl.available:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{tpl.name}" WITH (FORCE)')


@pytest.fixture
async def fresh_schema(
    request: pytest.FixtureRequest, pg_dsn: str, templates: MigratedTemplates
) -> AsyncIterator[str]:
    """Yield the DSN of the test's own place in the database; drop it afterwards.

    A test that uses `pool` gets a database cloned from the migrated template (the pool
    finds nothing left to migrate); any other test an empty schema, which it may migrate
    itself.
    """
    if "pool" in request.fixturenames:
        name = await templates.clone()
        if name is not None:
            try:
                yield templates.dsn_of(name)
            finally:
                await templates.drop(name)
            return
    schema = f"t_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema_dsn(pg_dsn, schema)
    finally:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
async def pool(fresh_schema: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    """Yield an open pool on a fresh, migrated database (or schema)."""
    p = make_pool(fresh_schema, 1, 10)
    await p.open()
    await p.wait(timeout=10)
    await migrate(p)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture(scope="session")
def fake_llm() -> Iterator[FakeOpenAI]:
    """Run one local OpenAI-compatible server for the session; reset it per test."""
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def llm(fake_llm: FakeOpenAI) -> FakeOpenAI:
    """Return the local model server, reset to its defaults.

    The memory models (summary, facts, compacts) are `MEMORY_MODEL` unless a test says
    otherwise, answered by `memory_reply`, so they never take the chat model's scripted
    replies.
    """
    fake_llm.reset()
    fake_llm.default_for(MEMORY_MODEL, memory_reply)
    return fake_llm


def make_settings(llm: FakeOpenAI | None = None, **overrides: Any) -> Settings:
    """Return settings isolated from the developer's `.env`, pointed at the fake model."""
    values: dict[str, Any] = {
        "llm_max_retries": 0,
        "llm_timeout": 10.0,
        "summary_model": MEMORY_MODEL,
        # Semantic search is tested where it is the subject; elsewhere a background
        # embedding model would only spend the machine's two cores.
        "embedding_provider": "off",
        # Memory work retried at once after a failure: tests of back-off set it.
        "memory_retry_seconds": 0.0,
        # Memory calls go at once, as on a server that answers many requests at a time:
        # waiting for idle time on a one-slot server is tested where it is the subject
        # (test_memory_idle.py, tests/e2e/test_chat_one_slot.py).
        "memory_waits_for_replies": "never",
    }
    if llm is not None:
        values |= {"openai_base_url": llm.base_url, "openai_api_key": "test-key"}
    values |= overrides
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture
async def runtime_factory(
    pool: AsyncConnectionPool[Any], llm: FakeOpenAI
) -> AsyncIterator[Callable[..., Awaitable[Runtime]]]:
    """Build runtimes over the test's pool and the local model server."""
    made: list[Runtime] = []

    async def build(**overrides: Any) -> Runtime:
        rt = await build_runtime(make_settings(llm, **overrides), pool=pool)
        made.append(rt)
        return rt

    yield build
    for rt in made:
        await rt.close()
