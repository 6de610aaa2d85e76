"""Reaching PostgreSQL: clear failures, no leaked passwords, the persistent embedded server."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from src.config import load_settings
from src.storage.pg_client import (
    DatabaseUnavailable,
    background_context,
    check_connection,
    describe_dsn,
    open_pool,
    open_pool_from_settings,
    resolve_dsn,
    start_embedded,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    """Return a loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_unreachable_server_names_host_and_port() -> None:
    port = closed_port()
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as info:
        await open_pool(f"postgresql://nobody:pw-never-shown@127.0.0.1:{port}/x")
    assert time.monotonic() - started < 10
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message
    assert "pw-never-shown" not in message
    assert "\n" not in message


async def test_silent_server_times_out_with_clear_error() -> None:
    """A host that accepts TCP but never answers (a firewall, a hung server) fails in time."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable) as info:
            await open_pool(f"host=127.0.0.1 port={port} dbname=x user=u", connect_timeout=2)
        elapsed = time.monotonic() - started
    assert elapsed < 10
    assert f"127.0.0.1:{port}" in str(info.value)


async def test_settings_path_names_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    port = closed_port()
    settings = load_settings(
        _env_file=None, pg_host="127.0.0.1", pg_port=port, pg_password="pw-never-shown"
    )
    with pytest.raises(DatabaseUnavailable) as info:
        await asyncio.wait_for(open_pool_from_settings(settings), 10)
    assert f"127.0.0.1:{port}/ai_db" in str(info.value)
    assert "pw-never-shown" not in str(info.value)


@pytest.mark.server
async def test_open_pool_on_real_server(pg_dsn: str) -> None:
    pool = await open_pool(pg_dsn, 1, 2)
    try:
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT current_setting('TimeZone') AS tz")).fetchone()
        assert row == {"tz": "UTC"}
    finally:
        await pool.close()


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://bob:s3cr3t-pw@db.example:6543/app", "db.example:6543/app"),
        ("host=db.example port=6543 dbname=app user=bob password=s3cr3t-pw", "db.example:6543/app"),
        ("postgresql://bob:s3cr3t-pw@db.example/app", "db.example:5432/app"),
        ("postgresql://postgres:@/postgres?host=/tmp/tga-x/pg", "/tmp/tga-x/pg:5432/postgres"),
        ("postgresql://bob:s3cr3t-pw@/app?host=h&password=s3cr3t-pw", "h:5432/app"),
        ("host='unterminated password=s3cr3t-pw", "<malformed DSN>"),
    ],
)
def test_describe_dsn_never_shows_a_password(dsn: str, shown: str) -> None:
    assert describe_dsn(dsn) == shown
    assert "s3cr3t" not in describe_dsn(dsn)


# --- the embedded server ---


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """Yield a short directory (unix socket paths are limited) and stop any server in it."""
    path = Path(tempfile.mkdtemp(prefix="tga-", dir="/tmp"))
    try:
        yield path
    finally:
        stop_embedded(path / "pg")
        shutil.rmtree(path, ignore_errors=True)


def postmaster_pid(pgdata: Path) -> int | None:
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return None
    return int(pid_file.read_text().split()[0])


def stop_embedded(pgdata: Path) -> None:
    """Stop the server in `pgdata` as a process exit would leave it: fast shutdown."""
    pid = postmaster_pid(pgdata)
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def read_in_new_process(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """Start (or find) the embedded server in a fresh process, as the next run would."""
    code = (
        "import sys, psycopg\n"
        "from pathlib import Path\n"
        "from src.storage.pg_client import start_embedded\n"
        "dsn = start_embedded(Path(sys.argv[1]))\n"
        "with psycopg.connect(dsn) as c:\n"
        "    print(c.execute('SELECT v FROM kept').fetchone()[0])\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(data_dir)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def test_embedded_starts_and_persists(short_dir: Path) -> None:
    dsn = start_embedded(short_dir)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (v TEXT)")
        conn.execute("INSERT INTO kept VALUES ('still here')")
    assert (short_dir / "pg" / "PG_VERSION").exists()
    pid = postmaster_pid(short_dir / "pg")
    # A second call reuses the same server and data directory.
    assert start_embedded(short_dir) == dsn
    assert postmaster_pid(short_dir / "pg") == pid

    # The next run after a stop (a reboot, the last process exiting) finds the data again.
    stop_embedded(short_dir / "pg")
    result = read_in_new_process(short_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "still here"
    assert postmaster_pid(short_dir / "pg") not in (None, pid)


def test_resolve_dsn_uses_embedded_only_without_server(short_dir: Path) -> None:
    configured = load_settings(
        _env_file=None, database_url="postgresql://u@h/db", tgagent_data_dir=short_dir
    )
    assert resolve_dsn(configured) == "postgresql://u@h/db"
    assert not (short_dir / "pg").exists()


def test_too_long_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    long_dir = tmp_path / ("d" * 120)
    with pytest.raises(DatabaseUnavailable) as info:
        start_embedded(long_dir)
    message = str(info.value)
    assert "TGAGENT_DATA_DIR" in message and "too long" in message
    assert not long_dir.exists()


def test_too_long_data_dir_from_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("DATABASE_URL", "PG_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TGAGENT_DATA_DIR", str(tmp_path / ("d" * 120)))
    settings = load_settings(_env_file=None)
    assert settings.uses_embedded_db
    with pytest.raises(DatabaseUnavailable, match="TGAGENT_DATA_DIR"):
        resolve_dsn(settings)


@pytest.mark.server
async def test_a_connection_the_server_closed_is_replaced(pg_dsn: str) -> None:
    """The pool's check reads the server's goodbye (no query): the pool lends a new one."""
    pool = await open_pool(pg_dsn, 1, 1)
    try:
        async with pool.connection() as conn:
            pid = conn.info.backend_pid
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        await asyncio.sleep(0.2)  # the goodbye reaches the client's socket
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone()
        assert row is not None and row["pid"] != pid
        async with pool.connection() as conn:
            await check_connection(conn)  # a healthy connection passes, and stays usable
            assert (await (await conn.execute("SELECT 1 AS one")).fetchone()) == {"one": 1}
    finally:
        await pool.close()


@pytest.mark.server
async def test_background_work_leaves_the_turns_their_connections(pg_dsn: str) -> None:
    """Hundreds of memory tasks after replies must not queue ahead of a turn in the pool:
    background checkouts wait for their share (half the pool) outside it, so a turn's
    checkout finds a free connection while every background task is still waiting."""
    pool = await open_pool(pg_dsn, 1, 4)
    release = asyncio.Event()
    holding = 0

    async def memory_work() -> None:
        nonlocal holding
        async with pool.connection() as conn:
            await conn.execute("SELECT 1")
            holding += 1
            await release.wait()
            # A nested checkout of a task that holds its share is not gated again.
            async with pool.connection() as inner:
                await inner.execute("SELECT 2")
            holding -= 1

    try:
        background = [
            asyncio.create_task(memory_work(), context=background_context()) for _ in range(50)
        ]
        deadline = time.monotonic() + 10
        while holding < 2:
            assert time.monotonic() < deadline, "the background got no connection"
            await asyncio.sleep(0.01)
        async with pool.connection(timeout=5) as conn:  # a turn: served at once
            assert (await (await conn.execute("SELECT 1 AS one")).fetchone()) == {"one": 1}
        assert holding == 2, "background work took more than its share"
        release.set()
        await asyncio.wait_for(asyncio.gather(*background), 30)
        assert holding == 0
    finally:
        release.set()
        await pool.close()
