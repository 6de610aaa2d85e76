"""`tgagent chat` driven through stdin against the local model server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from src.services.local_model import CANDIDATES_ENV

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _run_chat(
    env: dict[str, str], stdin: str, cwd: Path, lang: str | None = "en"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "src.cli", "chat", "--user-id", "42"]
        + (["--lang", lang] if lang else []),
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(dsn: str, **extra: str) -> dict[str, str]:
    locale = ("LC_ALL", "LC_MESSAGES", "LANG")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "PG_")) and k not in locale
    }
    # Never the developer's own Ollama: local discovery looks where each test says.
    env[CANDIDATES_ENV] = f"http://127.0.0.1:{_closed_port()}/v1"
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


@pytest.mark.parametrize(
    ("lang", "expected"),
    [("ru_RU.UTF-8", "Три способа"), ("en_US.UTF-8", "Three ways"), ("C.UTF-8", "Three ways")],
)
async def test_chat_without_any_model_lists_three_ways_in_the_terminal_language(
    fresh_schema: str, tmp_path: Path, lang: str, expected: str
) -> None:
    out = _run_chat(_env(fresh_schema, LANG=lang), "hello\n", tmp_path, lang=None)
    assert out.returncode == 2
    assert expected in out.stderr and "Traceback" not in out.stderr
    assert "OPENAI_API_KEY" in out.stderr and "Ollama" in out.stderr and "llama.cpp" in out.stderr
    assert out.stdout == ""


async def test_chat_finds_a_local_server_and_says_which_model(
    pool: Any, fresh_schema: str, llm: Any, tmp_path: Path
) -> None:
    saved = llm.models
    llm.models = ["nomic-embed-text", "qwen2.5:7b"]
    try:
        llm.script_for("qwen2.5:7b", "Привет от локальной модели.")
        dead = f"http://127.0.0.1:{_closed_port()}/v1"
        env = _env(fresh_schema, LANG="ru_RU.UTF-8", **{CANDIDATES_ENV: f"{dead},{llm.base_url}"})
        out = _run_chat(env, "привет\n/help\n", tmp_path, lang=None)
    finally:
        llm.models = saved
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "Привет от локальной модели."
    assert "/new — начать новый разговор" in out.stdout  # --lang follows LANG
    assert "qwen2.5:7b" in out.stderr and llm.base_url in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Окно контекста 16000 токенов (сервер не сказал" in out.stderr  # and its window
    assert [r["model"] for r in llm.requests] == ["qwen2.5:7b"]


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


async def test_the_terminal_chat_promises_no_reminder_it_cannot_deliver(
    pool: Any, fresh_schema: str, llm: Any, tmp_path: Path
) -> None:
    """Scheduled tasks are run by the bot and delivered in Telegram: in `tgagent chat` the
    model's schedule_task is refused with the reason, so the model says it cannot, and
    no task is stored that would never arrive."""
    call = {"name": "schedule_task", "args": {"when": "in 1 minute", "instruction": "Stretch"}}
    llm.script({"tool_calls": [call]}, "I cannot set reminders here, sorry.")
    env = _env(fresh_schema, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test-key")
    out = _run_chat(env, "remind me in a minute to stretch\n", tmp_path)
    assert out.returncode == 0, out.stderr
    assert "I cannot set reminders here, sorry." in out.stdout
    results = [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool"]
    assert len(results) == 1 and "terminal chat, where no task runs" in results[0]
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM scheduled_tasks")
        assert (await cur.fetchone())["n"] == 0
