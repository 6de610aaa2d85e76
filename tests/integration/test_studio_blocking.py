"""LangGraph Studio's dev server refuses a blocking call on its event loop (`blockbuster`,
unless `langgraph dev --allow-blocking`): the graph factories and a turn make none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from blockbuster import BlockBuster, blockbuster_ctx

from tests.fakes.memory_model import MEMORY_MODEL
from tests.integration.test_devtools import _as_url


@pytest.fixture
def studio_env(
    fresh_schema: str, llm: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[None]:
    """Settings as `langgraph dev` gives them: the environment, no `.env` here."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", _as_url(fresh_schema))
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("EMBEDDING_PROVIDER", "off")
    # Memory work due at every turn, so its nodes run too.
    monkeypatch.setenv("SUMMARY_MODEL", MEMORY_MODEL)
    monkeypatch.setenv("MAX_CONTEXT", "3")
    monkeypatch.setenv("SUMMARY_TRIGGER", "1")
    monkeypatch.setenv("FACTS_EVERY", "1")
    yield


@pytest.fixture
def blockbuster() -> Iterator[BlockBuster]:
    """Every blocking call on the event loop raises `BlockingError`, as in the dev server."""
    with blockbuster_ctx() as bb:
        yield bb


async def test_a_studio_turn_makes_no_blocking_call(
    studio_env: None, llm: Any, blockbuster: BlockBuster
) -> None:
    from src.devtools import studio

    calls = [
        {"name": "search_history", "args": {"query": "Barsik"}},
        {"name": "recall_previous_conversations", "args": {}},
        {"name": "remember_fact", "args": {"key": "cat", "value": "Barsik", "type": "fact"}},
        {"name": "view_thread", "args": {}},
        {"name": "set_timezone", "args": {"zone": "europe/berlin"}},
    ]
    llm.script({"tool_calls": calls}, "Noted.", "Hi from Studio", "Barsik.")
    async with studio.make_chat_graph({}) as chat:
        texts = ["My cat is Barsik, I live in Berlin", "Hello from Studio", "My cat?"]
        outs = [await chat.ainvoke({"user_id": 7, "text": text}) for text in texts]
    assert [out["reply"] for out in outs] == ["Noted.", "Hi from Studio", "Barsik."]
    assert outs[0]["tools_used"] == [call["name"] for call in calls]
    assert any(out.get("summarized") for out in outs) and any(o["facts_learned"] for o in outs)
    async with studio.make_graph({}) as graph:
        assert "agent" in graph.get_graph().nodes
