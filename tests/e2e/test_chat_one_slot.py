"""The answer before memory work, on a model server that serves one request at a time.

A local server (llama.cpp, llama-cpp-python, Ollama) queues requests behind the one it
serves: memory work sent while an answer is on its way would be served first. Here the
fake plays such a server, writing slowly until its cap, and 25 lines are typed at once
into `tgagent chat`: the answers go one after the other, the memory work after them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_chat_cli import _env
from tests.fakes.memory_model import MEMORY_MODEL

pytestmark = pytest.mark.slow

CHAT_MODEL = "fake-model"
LINES = [f"My item{i} is thing{i}. Tell me about line {i}." for i in range(25)]
LONG = " ".join(f"word{i}" for i in range(300))  # never stops: cut at the cap


async def test_typed_lines_are_answered_before_any_memory_work(
    pool: Any, fresh_schema: str, llm: Any, tmp_path: Path
) -> None:
    llm.slots = 1
    llm.token_seconds = 0.004
    llm.default_for(CHAT_MODEL, LONG)
    env = _env(
        fresh_schema,
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        LLM_MODEL=CHAT_MODEL,
        SUMMARY_MODEL=MEMORY_MODEL,
        LLM_MAX_OUTPUT_TOKENS="48",
        MEMORY_MAX_OUTPUT_TOKENS="300",
        MAX_CONTEXT="12",  # folds are due from the fourth turn
        FACTS_EVERY="2",  # and facts every second line
        MEMORY_RETRY_SECONDS="0",
        EMBEDDING_PROVIDER="off",
    )
    out = subprocess.run(
        [sys.executable, "-m", "src.cli", "chat", "--user-id", "55", "--lang", "en"],
        input="".join(line + "\n" for line in LINES),
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    answers = out.stdout.splitlines()
    assert len(answers) == 25 and all(a.startswith("word0 word1") for a in answers)

    served = [llm.requests[i] for i in llm.served]
    models = [r["model"] for r in served]
    assert set(models) == {CHAT_MODEL, MEMORY_MODEL}, models
    last_answer = max(i for i, m in enumerate(models) if m == CHAT_MODEL)
    first_memory = models.index(MEMORY_MODEL)
    # Every answer was served before any memory call: none waited behind one.
    assert models.count(CHAT_MODEL) == 25 and first_memory > last_answer, models
    for line, request in zip(LINES, served[:25], strict=True):
        assert line in request["messages"][-1]["content"]
    # Every memory call is bounded: its output cap at most MEMORY_MAX_OUTPUT_TOKENS.
    memory = [r for r in served if r["model"] == MEMORY_MODEL]
    caps = [r.get("max_completion_tokens") or r.get("max_tokens") for r in memory]
    assert all(cap is not None and cap <= 300 for cap in caps), caps

    # The memory work after them completed before the chat ended: the summary holds
    # what left the window, and the facts of the lines were extracted.
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE NOT summarized) AS unfolded, count(*) AS stored"
            " FROM messages"
        )
        row = await cur.fetchone()
        assert row["stored"] == 50
        assert row["unfolded"] <= 12, row  # at most the window
        cur = await conn.execute("SELECT summary FROM conversations")
        assert "thing" in (await cur.fetchone())["summary"]
        cur = await conn.execute("SELECT count(*) AS n FROM facts")
        assert (await cur.fetchone())["n"] > 0
