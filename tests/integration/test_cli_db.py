"""`tgagent db migrate|status` as a user runs them: a subprocess, real PostgreSQL."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
import pytest

from src.config import Settings
from src.storage.migrations import discover

pytestmark = [pytest.mark.server, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]


def as_url(dsn: str) -> str:
    """Return a libpq DSN (key=value or URL) as a `postgresql://` URL, every key kept."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    dbname = str(info.pop("dbname", "") or "")
    query = urlencode({k: str(v) for k, v in info.items() if v is not None}, quote_via=quote)
    return f"postgresql:///{quote(dbname)}?{query}"


def run_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m src.cli` in `tmp_path` (so no `.env` is read) with only `env` set."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k.upper() not in {n.upper() for n in Settings.model_fields} | {"TEST_DATABASE_URL"}
    }
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), clean.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "src.cli", *args],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


@pytest.fixture
def schema_url(fresh_schema: str) -> str:
    return as_url(fresh_schema)


def test_as_url_keeps_options() -> None:
    dsn = "host=127.0.0.1 port=5432 user=postgres dbname=test options='-c search_path=t_x'"
    assert psycopg.conninfo.conninfo_to_dict(as_url(dsn)) == psycopg.conninfo.conninfo_to_dict(dsn)


def test_migrate_twice_then_status(tmp_path: Path, schema_url: str) -> None:
    names = [m.name for m in discover()]
    first = run_cli(tmp_path, "db", "migrate", DATABASE_URL=schema_url)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [f"applied {name}" for name in names]

    second = run_cli(tmp_path, "db", "migrate", DATABASE_URL=schema_url)
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stdout
    assert "applied" not in second.stdout

    status = run_cli(tmp_path, "db", "status", DATABASE_URL=schema_url)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert len(lines) == len(names)
    for line, mig in zip(lines, discover(), strict=True):
        assert line.startswith(f"{mig.version:04d}  applied  ")
        assert line.endswith(mig.name)


def test_status_before_migrate_lists_pending(tmp_path: Path, schema_url: str) -> None:
    status = run_cli(tmp_path, "db", "status", DATABASE_URL=schema_url)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        [f"{m.version:04d}", "pending"] for m in discover()
    ]


def test_unreachable_server_is_one_clear_line(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "db", "migrate", DATABASE_URL="postgresql://nobody@127.0.0.1:1/x")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "127.0.0.1:1" in lines[0]
    assert result.stdout == ""


def test_password_never_printed_on_failure(tmp_path: Path) -> None:
    url = "postgresql://nobody:hunter2secret@127.0.0.1:1/x"
    result = run_cli(tmp_path, "db", "status", DATABASE_URL=url)
    assert result.returncode != 0
    assert "hunter2secret" not in result.stderr + result.stdout


@pytest.mark.parametrize("password", ["se cret=pw'x", 'pw "quoted" \\ end'])
def test_pg_vars_connection_failure_is_one_line_without_the_password(
    tmp_path: Path, password: str
) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_cli(
        tmp_path, "db", "status", PG_HOST="127.0.0.1", PG_PORT=str(port), PG_PASSWORD=password
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"127.0.0.1:{port}" in lines[0]
    for part in (password, *(p for p in password.split() if len(p) > 3)):
        assert part not in result.stderr + result.stdout


def test_pg_vars_password_with_spaces_connects(tmp_path: Path, pg_dsn: str) -> None:
    info = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    if not info.get("host") or info["host"].startswith("/"):
        pytest.skip("needs a TCP server")
    env = {
        "PG_HOST": str(info["host"]),
        "PG_PORT": str(info.get("port") or 5432),
        "PG_DB": str(info.get("dbname") or "postgres"),
        "PG_USER": str(info.get("user") or "postgres"),
        "PG_PASSWORD": str(info.get("password") or "") + ' it\'s = "fine"',
    }
    result = run_cli(tmp_path, "db", "status", **env)
    # A trust-auth server ignores the password; what matters is that the DSN parses.
    if "password authentication failed" in result.stderr:
        pytest.skip("the server checks passwords")
    assert result.returncode == 0, result.stderr


def test_invalid_setting_exits_2_naming_it(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "db", "migrate", MAX_CONTEXT="-3")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "MAX_CONTEXT" in lines[0]


def test_env_file_in_working_directory_is_used(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("MAX_CONTEXT=-3\n", encoding="utf-8")
    result = run_cli(tmp_path, "db", "status")
    assert result.returncode == 2
    assert "MAX_CONTEXT" in result.stderr


def _stop_embedded(pgdata: Path) -> None:
    """Stop the embedded server a CLI run left running (it outlives the command)."""
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text().splitlines()[0])
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def test_first_migrate_on_the_embedded_server_prints_one_line_per_migration(
    tmp_path: Path,
) -> None:
    # Short: the embedded server's unix socket lives in its data directory.
    data_dir = Path(tempfile.mkdtemp(prefix="tgc-", dir="/tmp"))
    try:
        result = run_cli(tmp_path, "db", "migrate", TGAGENT_DATA_DIR=str(data_dir))
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        assert result.stdout.splitlines() == [f"applied {m.name}" for m in discover()]
    finally:
        _stop_embedded(data_dir / "pg")
        shutil.rmtree(data_dir, ignore_errors=True)
