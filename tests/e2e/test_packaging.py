"""What `pip install .` and a wheel install get: the migrations inside, bench and tests out."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from src.storage.migrations import discover

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    (path,) = out.glob("tgagent-*.whl")
    return path


def test_wheel_ships_the_migrations_byte_for_byte(wheel: Path) -> None:
    migrations = discover()
    assert migrations, "no migrations in the source tree"
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        for mig in migrations:
            if mig.path is None:  # the job queue's schema ships inside procrastinate
                continue
            inside = f"src/storage/sql/{mig.name}"
            assert inside in names, inside
            assert whl.read(inside) == mig.path.read_bytes()


def test_wheel_ships_the_web_page_files(wheel: Path) -> None:
    web = ROOT / "src" / "devtools" / "web"
    files = [*web.glob("templates/*.html"), *web.glob("static/*")]
    assert len(files) >= 4
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        for path in files:
            assert str(path.relative_to(ROOT)) in names, path


def test_wheel_installs_only_the_application(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert whl.read(top_level).decode().split() == ["src"]
    tops = {name.split("/")[0] for name in names}
    assert not {"bench", "tests", "sql"} & tops, sorted(tops)


def _python(code: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    names = ("DATABASE_URL", "TEST_DATABASE_URL", "PG_HOST")
    env = {k: v for k, v in os.environ.items() if k not in names}
    env |= {"PYTHONPATH": str(ROOT), **extra}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_migrate_refuses_without_migrations(tmp_path: Path) -> None:
    empty = tmp_path / "sql"
    empty.mkdir()
    code = (
        "import sys, pathlib\n"
        "import src.storage.migrations as m\n"
        "m.SQL_DIR = pathlib.Path(sys.argv[1])\n"
        "from src.cli import main\n"
        "sys.exit(main(['db', 'migrate']))\n"
    )
    # An unreachable server: the refusal comes before any connection.
    result = _python(code, str(empty), DATABASE_URL="postgresql://x@127.0.0.1:1/x")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no migrations found" in lines[0], result.stderr
    assert str(empty) in lines[0] and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_bench_without_the_checkout_says_so_in_one_line(tmp_path: Path) -> None:
    code = (
        "import sys, pathlib\n"
        "sys.modules['bench'] = None  # as in a wheel install: no bench package\n"
        "import src.cli_commands as c\n"
        "c.CHECKOUT = pathlib.Path(sys.argv[1])\n"
        "from src.cli import main\n"
        "sys.exit(main(['bench', '--quick']))\n"
    )
    result = _python(code, str(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "source checkout" in lines[0], result.stderr
