"""Across sessions (seed 001): compacts on /new and on idle, failures, the next session."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from src.graph import prompts
from src.services.agent_service import Identity
from src.services.compaction import COMPACT_CHARS, TOO_LONG_CHARS
from tests.fakes.openai_server import Fault

OLGA = Identity(6101, "olga", "Olga", "ru")
COMPACT = "compact-model"
CHAT = "gpt-4o-mini"


def compact_json(summary: str, topics: list[str] | None = None, last: str = "") -> str:
    body = {"timestamp": "2024-12-21T15:30:00Z", "summary": summary, "topics": topics or []}
    return json.dumps(body | {"lastAction": last}, ensure_ascii=False)


async def chat(rt: Any, *texts: str) -> None:
    for text in texts:
        assert (await rt.service.handle_message(OLGA, text)).ok
    await rt.service.drain()


def last_system(llm: Any) -> str:
    return str(llm.requests_for(CHAT)[-1]["messages"][0]["content"])


async def test_new_compacts_the_session_for_the_next_one(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(compact_model=COMPACT)
    await chat(rt, "Хочу добавить звук для wake-word", "И подключить Spotify")
    old = await rt.deps.conversations.get_or_create_conversation(OLGA.owner_id)
    last = (await rt.deps.conversations.load_last_messages(old))[-1]
    llm.script_for(
        COMPACT,
        compact_json("Настраивали wake-word и Spotify.", ["wake-word", "spotify"], "Добавили звук"),
    )
    new = await rt.service.new_conversation(OLGA)

    request = llm.requests_for(COMPACT)[0]
    assert request["messages"][0]["content"] == prompts.COMPACT_SYSTEM
    assert "подключить Spotify" in request["messages"][-1]["content"]
    (row,) = await rt.deps.memory.list_compacts(OLGA.owner_id)
    assert row["conversation_id"] == old and row["created_at"] == last["created_at"]
    assert row["topics"] == ["wake-word", "spotify"] and row["last_action"] == "Добавили звук"

    await chat(rt, "Что мы обсуждали раньше?")
    system = last_system(llm)
    assert prompts.PREVIOUS_CONVERSATIONS_HEADER in system
    assert "Настраивали wake-word и Spotify. Topics: wake-word, spotify." in system
    assert "Last action: Добавили звук." in system
    assert await rt.deps.conversations.get_or_create_conversation(OLGA.owner_id) == new

    llm.script({"tool_calls": [{"name": "recall_previous_conversations", "args": {}}]}, "Да.")
    result = await rt.service.handle_message(OLGA, "Напомни подробнее")
    assert result.tools_used == ["recall_previous_conversations"]
    tool = [m for m in llm.last_request()["messages"] if m["role"] == "tool"][0]
    assert "Настраивали wake-word и Spotify." in tool["content"]


@pytest.mark.parametrize("fault", ["http_error", "malformed_body", "empty", "plain_text", "long"])
async def test_failed_compaction_never_blocks_new(
    runtime_factory: Any, llm: Any, fault: str
) -> None:
    rt = await runtime_factory(compact_model=COMPACT)
    await chat(rt, "Готовлюсь к марафону", "Что есть перед стартом?")
    # Each fault goes to the compaction model's own request: fact extraction at the end of
    # the session runs beside it and could take a fault meant for "the next request".
    if fault == "http_error":
        llm.script_for(COMPACT, Fault(500))
    elif fault == "malformed_body":
        llm.script_for(COMPACT, Fault(kind="malformed"))
    elif fault == "empty":
        llm.script_for(COMPACT, "")
    elif fault == "plain_text":
        llm.script_for(COMPACT, "Говорили о марафоне и питании перед стартом.")
    else:
        # Far over 500 characters, yet within the compact's output cap.
        llm.script_for(COMPACT, compact_json("Очень длинный пересказ. " * 40, ["марафон"]))
    await rt.service.new_conversation(OLGA)

    (row,) = await rt.deps.memory.list_compacts(OLGA.owner_id)
    assert 0 < len(row["summary"]) <= TOO_LONG_CHARS
    if fault in ("http_error", "malformed_body", "empty"):
        assert "Готовлюсь к марафону" in row["summary"]  # recorded as plain text
    elif fault == "plain_text":
        assert row["summary"] == "Говорили о марафоне и питании перед стартом."
    else:
        assert len(row["summary"]) <= COMPACT_CHARS and row["summary"].endswith(".")
        assert row["topics"] == ["марафон"]
    await chat(rt, "Новая тема")
    assert "марафон" in last_system(llm)


async def test_slow_compaction_finishes_in_the_background(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(compact_model=COMPACT)
    rt.service.compactor.wait_seconds = 0.2
    await chat(rt, "Планирую поездку в Грузию")
    # The compact model answers only when the test lets it: /new must not wait for it.
    answer_now = threading.Event()

    async def held(request: dict[str, Any]) -> str:
        await asyncio.to_thread(answer_now.wait, 30)
        return compact_json("Планировали поездку в Грузию.")

    llm.script_for(COMPACT, held)
    await rt.service.new_conversation(OLGA)
    assert not answer_now.is_set() and len(llm.requests_for(COMPACT)) == 1
    # A compact exists at once (plain text from the session), replaced by the model's.
    (stand_in,) = await rt.deps.memory.list_compacts(OLGA.owner_id)
    assert "Планирую поездку в Грузию" in stand_in["summary"]
    answer_now.set()
    await rt.service.drain()
    (row,) = await rt.deps.memory.list_compacts(OLGA.owner_id)
    assert row["summary"] == "Планировали поездку в Грузию."


async def test_five_kept_three_shown(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(compact_model=COMPACT)
    for i in range(6):
        await chat(rt, f"сессия {i}")
        llm.script_for(COMPACT, compact_json(f"Сессия номер {i}."))
        await rt.service.new_conversation(OLGA)
    rows = await rt.deps.memory.list_compacts(OLGA.owner_id, 10)
    assert [r["summary"] for r in rows] == [f"Сессия номер {i}." for i in (5, 4, 3, 2, 1)]
    await chat(rt, "привет")
    system = last_system(llm)
    shown = [i for i in range(6) if f"Сессия номер {i}." in system]
    assert shown == [3, 4, 5]
    assert system.index("номер 3") < system.index("номер 5")  # oldest first


async def test_idle_session_is_compacted_and_the_conversation_goes_on(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory(compact_model=COMPACT, session_idle_minutes=30)
    await rt.deps.memory.add_compact(OLGA.owner_id, None, "Давний разговор о книгах.", [], "")
    await chat(rt, "Обсудим ремонт кухни", "Бюджет 300 тысяч")
    conv = await rt.deps.conversations.get_or_create_conversation(OLGA.owner_id)
    soon = datetime.now(UTC) + timedelta(minutes=10)
    assert await rt.service.compact_idle_sessions(soon) == 0
    later = datetime.now(UTC) + timedelta(minutes=31)
    llm.script_for(COMPACT, compact_json("Обсуждали ремонт кухни, бюджет 300 тысяч.", ["ремонт"]))
    assert await rt.service.compact_idle_sessions(later) == 1
    compacts = await rt.deps.memory.list_compacts(OLGA.owner_id)
    assert compacts[0]["conversation_id"] == conv and compacts[0]["topics"] == ["ремонт"]
    assert (await rt.deps.conversations.get_conversation(conv))["ended_at"] is not None
    assert await rt.service.compact_idle_sessions(later) == 0  # nothing new since

    # The user comes back: same conversation, its history intact, the ended session's
    # compact under "Previous conversations" (issue 12), the older one still there.
    await chat(rt, "Продолжим про кухню")
    assert await rt.deps.conversations.get_or_create_conversation(OLGA.owner_id) == conv
    request = llm.requests_for(CHAT)[-1]
    assert any("Бюджет 300 тысяч" in m["content"] for m in request["messages"][1:])
    assert "Обсуждали ремонт кухни, бюджет 300 тысяч." in request["messages"][0]["content"]
    assert "Давний разговор о книгах." in request["messages"][0]["content"]

    # The second session ends: a compact of its own, covering only what came after.
    llm.script_for(COMPACT, compact_json("Ремонт кухни: бюджет и сроки."))
    even_later = later + timedelta(minutes=60)
    assert await rt.service.compact_idle_sessions(even_later) == 1
    rows = await rt.deps.memory.list_compacts(OLGA.owner_id)
    assert [r["summary"] for r in rows if r["conversation_id"] == conv] == [
        "Ремонт кухни: бюджет и сроки.",
        "Обсуждали ремонт кухни, бюджет 300 тысяч.",
    ]
    second = llm.requests_for(COMPACT)[-1]["messages"][-1]["content"]
    assert "Продолжим про кухню" in second and "Бюджет 300 тысяч" not in second


async def test_idle_compaction_survives_a_model_error(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(compact_model=COMPACT, session_idle_minutes=1)
    await chat(rt, "Выбираю ноутбук для работы")
    # The compaction's own model fails: fact extraction at the session's end runs beside it,
    # and a fault for "the next request" could be spent on that call instead.
    llm.script_for(COMPACT, Fault(503))
    assert await rt.service.compact_idle_sessions(datetime.now(UTC) + timedelta(minutes=2)) == 1
    assert len(llm.requests_for(COMPACT)) == 1
    (row,) = await rt.deps.memory.list_compacts(OLGA.owner_id)
    assert "Выбираю ноутбук для работы" in row["summary"]


async def test_forgotten_part_is_not_compacted(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(compact_model=COMPACT)
    await chat(rt, "секретный пароль 12345")
    await rt.service.forget(OLGA)
    await chat(rt, "расскажи про погоду")
    llm.script_for(COMPACT, compact_json("Говорили о погоде."))
    await rt.service.new_conversation(OLGA)
    prompt = llm.requests_for(COMPACT)[0]["messages"][-1]["content"]
    assert "погоду" in prompt and "12345" not in prompt


async def test_forgotten_only_session_makes_no_compact(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(compact_model=COMPACT)
    await chat(rt, "что-то")
    await rt.service.forget(OLGA)
    await rt.service.new_conversation(OLGA)
    assert llm.requests_for(COMPACT) == []
    assert await rt.deps.memory.list_compacts(OLGA.owner_id) == []


async def test_memory_report_and_clear(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(compact_model=COMPACT)
    await chat(rt, "привет")
    await rt.deps.memory.upsert_fact(OLGA.owner_id, "city", "Самара", "fact", 7)
    await rt.deps.memory.upsert_fact(OLGA.owner_id, "city", "Казань", "fact", 7)
    llm.script_for(COMPACT, compact_json("Поздоровались."))
    await rt.service.new_conversation(OLGA)
    report = await rt.service.memory_report(OLGA)
    assert [(f["key"], f["value"], f["previous_value"]) for f in report["facts"]] == [
        ("city", "Казань", "Самара")
    ]
    assert [c["summary"] for c in report["compacts"]] == ["Поздоровались."]
    assert await rt.service.clear_memory(OLGA) == (1, 1)
    report = await rt.service.memory_report(OLGA)
    assert report["facts"] == [] and report["compacts"] == []
    assert await rt.deps.memory.fact_changes(OLGA.owner_id) == []


async def test_concurrent_new_and_idle_job(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(compact_model=COMPACT, session_idle_minutes=1)
    await chat(rt, "первая сессия")
    later = datetime.now(UTC) + timedelta(minutes=5)
    await asyncio.gather(rt.service.new_conversation(OLGA), rt.service.compact_idle_sessions(later))
    await rt.service.drain()
    rows = await rt.deps.memory.list_compacts(OLGA.owner_id)
    assert len(rows) == 1  # one compact per session, however it ended
