"""What `pip install .` and a wheel install get: the migrations inside, bench and tests out."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import psycopg
import pytest

from src.config import Settings
from src.storage.migrations import discover
from tests.integration.test_cli_db import as_url

ROOT = Path(__file__).resolve().parents[2]
# One worker builds the wheel, once.
pytestmark = [pytest.mark.xdist_group("wheel"), pytest.mark.slow]


# What a build reads of the checkout; the rest (bench, tests, docs) never ships.
BUILD_INPUTS = ("pyproject.toml", "README.md", "src", "sql")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the wheel from a copy of the checkout's sources, as a clean clone has them:
    nothing left in the checkout (build/, *.egg-info, caches) can reach the wheel."""
    tree = tmp_path_factory.mktemp("tree")
    for name in BUILD_INPUTS:
        source = ROOT / name
        if source.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
            shutil.copytree(source, tree / name, ignore=ignore)
        else:
            shutil.copy2(source, tree / name)
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(out), str(tree)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = f"{build.stdout[-3000:]}\n{build.stderr[-2000:]}"
    assert build.returncode == 0, log
    (path,) = out.glob("tgagent-*.whl")
    with zipfile.ZipFile(path) as whl:
        names = whl.namelist()
    assert "src/__init__.py" in names, f"{len(names)} files: {names[:20]}\n{log}"
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


def test_wheel_ships_every_module_of_src(wheel: Path) -> None:
    # pyproject.toml lists the packages by name (top-level sql/ is mapped into one of
    # them): a package left off the list would be missing from every install.
    # The reverse too: a module moved away must not ship from a stale build directory.
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "src").rglob("*.py")}
    sql_init = "src/storage/sql/__init__.py"  # top-level sql/__init__.py, mapped there
    with zipfile.ZipFile(wheel) as whl:
        shipped = {n for n in whl.namelist() if n.endswith(".py")}
    assert sorted(modules - shipped) == []
    assert sorted(shipped - modules - {sql_init}) == []


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
        "import src.cli.bench as c\n"
        "c.CHECKOUT = pathlib.Path(sys.argv[1])\n"
        "from src.cli import main\n"
        "sys.exit(main(['bench', '--quick']))\n"
    )
    result = _python(code, str(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "source checkout" in lines[0], result.stderr


def test_installed_wheel_migrates_from_top_level_sql(
    wheel: Path, tmp_path: Path, fresh_schema: str
) -> None:
    """`tgagent db migrate` from a wheel in a fresh venv applies every file of sql/."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The dependencies come from this venv (offline); tgagent itself only from the wheel.
    Path(purelib, "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    settings = {n.upper() for n in Settings.model_fields} | {"TEST_DATABASE_URL", "PYTHONPATH"}
    env = {k: v for k, v in os.environ.items() if k.upper() not in settings}
    env["DATABASE_URL"] = as_url(fresh_schema)
    cwd = tmp_path / "elsewhere"  # no checkout, no .env
    cwd.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import src.storage.migrations as m; print(m.SQL_DIR)"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(purelib), where
    migrate = subprocess.run(
        [str(venv / "bin" / "tgagent"), "db", "migrate"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 0, migrate.stderr
    files = sorted((ROOT / "sql").glob("[0-9][0-9][0-9][0-9]_*.sql"))
    assert len(files) >= 17
    expected = {int(f.name[:4]) for f in files} | {11}  # 0011: procrastinate's schema
    with psycopg.connect(fresh_schema) as conn:
        applied = {row[0] for row in conn.execute("SELECT version FROM schema_versions")}
    assert applied == expected
    assert migrate.stdout.count("applied ") == len(expected)
