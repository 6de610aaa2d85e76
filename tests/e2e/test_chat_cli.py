"""`tgagent chat` driven through stdin against the local model server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _run_chat(env: dict[str, str], stdin: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "src.cli", "chat", "--user-id", "42", "--lang", "en"],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def _env(dsn: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PG_"))}
    env |= {"DATABASE_URL": dsn, "PYTHONPATH": str(ROOT), **extra}
    env.pop("TEST_DATABASE_URL", None)
    return env


async def test_chat_round_trip_and_commands(
    pool: Any, fresh_schema: str, llm: Any, tmp_path: Path
) -> None:
    llm.script("Nice to meet you, Ann.", "You are Ann.")
    env = _env(fresh_schema, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test-key")
    out = _run_chat(env, "My name is Ann\nWhat is my name?\n/help\n/bogus\n/forget\n", tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "Nice to meet you, Ann."
    assert lines[1] == "You are Ann."
    assert "/new" in out.stdout and "I don't know that command" in out.stdout
    assert "clean slate" in out.stdout
    second = llm.requests[1]["messages"]
    assert any("My name is Ann" in m["content"] for m in second if m["role"] == "user")
    assert "test-key" not in out.stderr
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT active_messages_count FROM users WHERE telegram_user_id = 42"
        )
        assert (await cur.fetchone())["active_messages_count"] == 0


async def test_chat_without_model_says_what_to_set(fresh_schema: str, tmp_path: Path) -> None:
    out = _run_chat(_env(fresh_schema), "hello\n", tmp_path)
    assert out.returncode == 2
    assert "OPENAI_API_KEY" in out.stderr and "Traceback" not in out.stderr


async def test_debug_logs_never_show_the_api_key(
    pool: Any, fresh_schema: str, llm: Any, tmp_path: Path
) -> None:
    secret = "sk-test-SECRET-4242424242"
    env = _env(fresh_schema, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY=secret)
    out = subprocess.run(
        [sys.executable, "-m", "src.cli", "--log-level", "DEBUG", "chat", "--user-id", "43"],
        input="hello there\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "DEBUG" in out.stderr  # the logs were really on
    assert secret not in out.stderr and secret not in out.stdout
    assert "Authorization" not in out.stderr or "Bearer sk-" not in out.stderr
