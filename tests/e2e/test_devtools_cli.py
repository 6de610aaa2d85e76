"""`tgagent graph|runs|replay|db prune` as a developer runs them: subprocesses, real
PostgreSQL, the local model server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from src.config import Settings
from src.devtools.checkpoints import CheckpointReader
from src.graph.main_graph import NODE_NAMES
from src.services.agent_service import Identity

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ALICE = Identity(301, "alice", "Alice", "en")


def cli_env(**env: str) -> dict[str, str]:
    """Return this process's environment without any setting, plus only `env`."""
    names = {n.upper() for n in Settings.model_fields} | {"TEST_DATABASE_URL"}
    clean = {k: v for k, v in os.environ.items() if k.upper() not in names}
    return clean | {"PYTHONPATH": str(ROOT), "LOG_LEVEL": "WARNING"} | env


def stopped(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """Wait for a process told to stop; return its stderr. One still running after
    `timeout` is aborted (SIGABRT: with PYTHONFAULTHANDLER set, it prints every thread's
    stack) and the test fails with what it printed, so a rare hang says where it was."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        err = proc.communicate(timeout=30)[1]
        told = f"still running {timeout} s after it was told to stop:\n{err}"
        raise AssertionError(told) from None


def run_cli(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m src.cli` in `cwd` (no `.env` there) with only `env` configured."""
    return subprocess.run(
        [sys.executable, "-m", "src.cli", *args],
        cwd=cwd,
        env=cli_env(**env),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def run_parallel(cwd: Path, *calls: tuple[tuple[str, ...], dict[str, str]]) -> list[Any]:
    """Run independent CLI calls at once (each pays the interpreter's start-up)."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(run_cli, cwd, *args, **env) for args, env in calls]
        return [f.result() for f in futures]


async def _three_turns(runtime_factory: Any, llm: Any) -> str:
    rt = await runtime_factory()
    llm.script("Nice to meet you, Alice!")
    await rt.service.handle_message(ALICE, "Hi, I'm Alice and my cat is called Barsik")
    llm.script(
        {"tool_calls": [{"name": "search_history", "args": {"query": "Barsik"}}]},
        "Your cat is called Barsik.",
    )
    await rt.service.handle_message(ALICE, "What is my cat called?")
    llm.script("Goodbye!")
    await rt.service.handle_message(ALICE, "Bye")
    await rt.service.drain()
    return str(await rt.deps.conversations.get_or_create_conversation(ALICE.owner_id))


def test_graph_and_a_missing_environment(fresh_schema: str, tmp_path: Path) -> None:
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    mermaid, png, no_tables = run_parallel(
        tmp_path,
        (("graph",), {}),
        (("graph", "--format", "png", "--out", "g.png"), {"PATH": str(empty_path)}),
        (("runs", "list"), {"DATABASE_URL": fresh_schema}),
    )
    assert mermaid.returncode == 0, mermaid.stderr
    assert "graph TD;" in mermaid.stdout
    for node in NODE_NAMES:
        assert f"\t{node}(" in mermaid.stdout, node
    assert "agent -.-> tools;" in mermaid.stdout and "tools --> agent;" in mermaid.stdout

    assert png.returncode == 2
    assert "mmdc" in png.stderr and "--format html" in png.stderr
    assert "Traceback" not in png.stderr and not (tmp_path / "g.png").exists()

    assert no_tables.returncode == 2
    assert "no LangGraph checkpoint tables" in no_tables.stderr
    assert "Traceback" not in no_tables.stderr


async def test_list_show_replay_commit_prune(
    runtime_factory: Any, pool: Any, fresh_schema: str, llm: Any, tmp_path: Path
) -> None:
    thread = await _three_turns(runtime_factory, llm)
    env = {"DATABASE_URL": fresh_schema, "OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "test"}

    llm.script_for("gpt-4.1-mini", "Barsik — replayed with another model.")
    listed, unknown = run_parallel(
        tmp_path,
        (("runs", "list", "--user", str(ALICE.owner_id), "--json"), env),
        (("replay", "no-such-thread", "--checkpoint", "x"), env),
    )
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)
    assert [r["message"] for r in runs][:2] == ["Bye", "What is my cat called?"]
    assert len(runs) == 3 and runs[1]["tools_used"] == ["search_history"]
    assert runs[1]["thread_id"] == thread
    second = runs[1]["checkpoint_id"]
    assert unknown.returncode == 1
    assert "no checkpoints for thread 'no-such-thread'" in unknown.stderr

    shown, dry = run_parallel(
        tmp_path,
        (("runs", "show", thread[:8], "--checkpoint", second), env),
        (("replay", thread, "--checkpoint", second, "--model", "gpt-4.1-mini"), env),
    )
    assert shown.returncode == 0, shown.stderr
    assert "turn 2 of 3" in shown.stdout and "calls search_history" in shown.stdout
    order = [shown.stdout.index(f" {n} ") for n in ("build_context", "agent", "tools")]
    assert order == sorted(order)
    assert dry.returncode == 0, dry.stderr
    assert "Your cat is called Barsik." in dry.stdout
    assert "Barsik — replayed with another model." in dry.stdout
    assert "dry run" in dry.stdout and "the replies differ" in dry.stdout
    assert llm.requests_for("gpt-4.1-mini")

    llm.script("A committed replay.")
    committed = run_cli(tmp_path, "replay", thread, "--checkpoint", second, "--commit", **env)
    assert committed.returncode == 0, committed.stderr
    assert "committed: fork " in committed.stdout
    relisted = run_cli(tmp_path, "runs", "list", "--json", **env)
    fork = json.loads(relisted.stdout)[0]
    assert fork["source"] == "fork" and fork["replay_of"] == second
    assert fork["reply"] == "A committed replay." and fork["checkpoint_id"] in committed.stdout

    pruned = run_cli(tmp_path, "db", "prune", **env, CHECKPOINT_KEEP="2")
    assert pruned.returncode == 0, pruned.stderr
    assert "kept the last 2 turns per conversation: deleted 2 turns" in pruned.stdout
    reader = CheckpointReader(pool)
    left = await reader.turns(thread)
    for turn in left:
        await reader.load_values(turn)
    assert [(t.head.source, t.input_text) for t in left] == [
        ("input", "Bye"),
        ("fork", "What is my cat called?"),
    ]


def test_web_refuses_to_listen_beyond_loopback_without_a_token(tmp_path: Path) -> None:
    # No database is configured: the refusal comes before any connection.
    refused = run_cli(tmp_path, "web", "--host", "0.0.0.0", PG_HOST="tgagent-nowhere.invalid")
    assert refused.returncode == 2
    assert "WEB_TOKEN" in refused.stderr and "Traceback" not in refused.stderr


async def test_web_serves_the_bot_database_until_interrupted(
    runtime_factory: Any, fresh_schema: str, llm: Any, tmp_path: Path
) -> None:
    await _three_turns(runtime_factory, llm)
    proc = subprocess.Popen(
        [sys.executable, "-m", "src.cli", "web", "--host", "0.0.0.0", "--port", "0"],
        cwd=tmp_path,
        env=cli_env(
            DATABASE_URL=fresh_schema,
            WEB_TOKEN="tok-e2e",
            LOG_LEVEL="INFO",
            PYTHONFAULTHANDLER="1",  # a process that hangs shows where (see `stopped`)
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
        port = re.search(r"http://0\.0\.0\.0:(\d+)/ \(every request needs WEB_TOKEN\)", line)
        assert port, line
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port.group(1)}") as web:
            assert (await web.get("/")).status_code == 401
            page = await web.get("/", headers={"Authorization": "Bearer tok-e2e"})
        assert page.status_code == 200 and "What is my cat called?" in page.text
    finally:
        proc.send_signal(signal.SIGINT)
        err = stopped(proc)
    assert proc.returncode == 130 and "200 GET / " in err and "tok-e2e" not in err
