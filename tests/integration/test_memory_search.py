"""search_history: full text in Russian and English over all of one user's messages."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from src.services.agent_service import Identity
from src.storage.conversation_repo import ConversationRepository
from src.storage.memory_repo import MemoryRepository, fts_query

Pool = AsyncConnectionPool[Any]
PAVEL = Identity(7101, "pavel", "Pavel", "ru")
OTHER = 7102


async def seed(pool: Pool, owner: int, *texts: str, role: str = "user") -> list[dict[str, Any]]:
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(owner)
    return [await repo.append_message(conv, role, text) for text in texts]


async def test_russian_and_english_word_forms(pool: Pool) -> None:
    await seed(
        pool,
        PAVEL.owner_id,
        "Мою кошку зовут Муся",
        "I was running in the park yesterday",
        "Купил новый ноутбук",
    )
    memory = MemoryRepository(pool)
    found = await memory.search_messages(PAVEL.owner_id, "кошка")
    assert [r["content"] for r in found] == ["Мою кошку зовут Муся"]
    found = await memory.search_messages(PAVEL.owner_id, "runs")
    assert [r["content"] for r in found] == ["I was running in the park yesterday"]
    found = await memory.search_messages(PAVEL.owner_id, "ноут")  # a word's beginning
    assert [r["content"] for r in found] == ["Купил новый ноутбук"]
    assert await memory.search_messages(PAVEL.owner_id, "собака") == []


async def test_best_match_first_and_limit(pool: Pool) -> None:
    await seed(
        pool, PAVEL.owner_id, "поездка в Грузию", "поездка", "Грузия и поездка в горы Грузии"
    )
    memory = MemoryRepository(pool)
    found = await memory.search_messages(PAVEL.owner_id, "поездка в Грузию")
    assert len(found) == 3 and found[-1]["content"] == "поездка"
    assert len(await memory.search_messages(PAVEL.owner_id, "поездка", limit=2)) == 2
    assert len(await memory.search_messages(PAVEL.owner_id, "поездка", limit=0)) == 1


async def test_squashed_included_tools_and_notes_excluded(pool: Pool) -> None:
    rows = await seed(pool, PAVEL.owner_id, "старая заметка про пароль от wifi")
    await seed(pool, PAVEL.owner_id, "Tools used: пароль", role="system")
    await seed(pool, PAVEL.owner_id, "результат поиска: пароль", role="tool")
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE messages SET squashed_at = now() WHERE id = %s", (rows[0]["id"],)
        )
    found = await MemoryRepository(pool).search_messages(PAVEL.owner_id, "пароль")
    assert [(r["content"], r["squashed"]) for r in found] == [
        ("старая заметка про пароль от wifi", True)
    ]


async def test_only_the_owners_messages(pool: Pool) -> None:
    await seed(pool, PAVEL.owner_id, "мой PIN 1111")
    await seed(pool, OTHER, "мой PIN 2222")
    memory = MemoryRepository(pool)
    assert [r["content"] for r in await memory.search_messages(PAVEL.owner_id, "PIN")] == [
        "мой PIN 1111"
    ]
    assert [r["content"] for r in await memory.search_messages(OTHER, "2222")] == ["мой PIN 2222"]
    assert await memory.search_messages(PAVEL.owner_id, "2222") == []


async def test_substring_fallback_and_current_message_excluded(pool: Pool) -> None:
    rows = await seed(pool, PAVEL.owner_id, "код двери: #42-Б", "найди код двери")
    memory = MemoryRepository(pool)
    found = await memory.search_messages(PAVEL.owner_id, "#42-Б")
    assert [r["content"] for r in found] == ["код двери: #42-Б"]
    found = await memory.search_messages(PAVEL.owner_id, "Б")  # no word to search: substring
    assert [r["content"] for r in found] == ["код двери: #42-Б"]
    found = await memory.search_messages(PAVEL.owner_id, "код двери", exclude_id=rows[1]["id"])
    assert [r["content"] for r in found] == ["код двери: #42-Б"]


@pytest.mark.parametrize(
    "query",
    ["'; DROP TABLE messages; --", "a:* & !b | (c", "\\", "%_%", "\x00", "   ", "ё" * 2000, "&|!"],
)
async def test_hostile_queries_are_plain_text(pool: Pool, query: str) -> None:
    await seed(pool, PAVEL.owner_id, "обычное сообщение")
    assert isinstance(await MemoryRepository(pool).search_messages(PAVEL.owner_id, query), list)


def test_fts_query_is_safe() -> None:
    assert fts_query("Где мой кот?") == "Где:* | мой:* | кот:*"
    assert fts_query("a:* & !b | (c)") == ""
    assert fts_query("snake_case_word") == "snake:* | case:* | word:*"


async def test_search_through_the_model(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(max_context=2)
    for text in ("Мою собаку зовут Рекс", "погода", "новости", "ещё что-то"):
        await rt.service.handle_message(PAVEL, text)
    llm.script(
        {"tool_calls": [{"name": "search_history", "args": {"query": "собака", "limit": 5}}]},
        "Вашу собаку зовут Рекс.",
    )
    result = await rt.service.handle_message(PAVEL, "как зовут мою собаку?")
    assert result.reply == "Вашу собаку зовут Рекс."
    tool = [m for m in llm.last_request()["messages"] if m["role"] == "tool"][0]["content"]
    assert "Мою собаку зовут Рекс" in tool and "как зовут мою собаку" not in tool
    assert tool.startswith("Found 1 message(s) for 'собака'")
    assert "- 20" in tool and " user: " in tool  # dated
