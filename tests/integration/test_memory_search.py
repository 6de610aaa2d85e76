"""search_history: full text in Russian and English over all of one user's messages."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from src.services.agent_service import Identity
from src.storage.conversation_repo import ConversationRepository
from src.storage.search_bm25 import StopWordsOnly, bm25, parse_query, term_frequencies
from src.storage.search_repo import SearchRepository

Pool = AsyncConnectionPool[Any]
PAVEL = Identity(7101, "pavel", "Pavel", "ru")
OTHER = 7102
OWNER_BLOCKS = itertools.count(7_200_000, 10)


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
    memory = SearchRepository(pool)
    found = await memory.search_messages(PAVEL.owner_id, "кошка")
    assert [r["content"] for r in found] == ["Мою кошку зовут Муся"]
    found = await memory.search_messages(PAVEL.owner_id, "runs")
    assert [r["content"] for r in found] == ["I was running in the park yesterday"]
    # Whole words: "ноут" is no word of these messages. With no whole-word match at all,
    # the phrase is looked for as a substring of the newest messages (bounded).
    found = await memory.search_messages(PAVEL.owner_id, "ноут")
    assert [r["content"] for r in found] == ["Купил новый ноутбук"]
    found = await memory.search_messages(PAVEL.owner_id, "ноут*")  # a prefix, as asked
    assert [r["content"] for r in found] == ["Купил новый ноутбук"]
    found = await memory.search_messages(PAVEL.owner_id, "run")  # a word form, not a prefix
    assert [r["content"] for r in found] == ["I was running in the park yesterday"]
    assert await memory.search_messages(PAVEL.owner_id, "собака") == []


async def test_best_match_first_and_limit(pool: Pool) -> None:
    await seed(
        pool, PAVEL.owner_id, "поездка в Грузию", "поездка", "Грузия и поездка в горы Грузии"
    )
    memory = SearchRepository(pool)
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
    found = await SearchRepository(pool).search_messages(PAVEL.owner_id, "пароль")
    assert [(r["content"], r["squashed"]) for r in found] == [
        ("старая заметка про пароль от wifi", True)
    ]


async def test_only_the_owners_messages(pool: Pool) -> None:
    await seed(pool, PAVEL.owner_id, "мой PIN 1111")
    await seed(pool, OTHER, "мой PIN 2222")
    memory = SearchRepository(pool)
    assert [r["content"] for r in await memory.search_messages(PAVEL.owner_id, "PIN")] == [
        "мой PIN 1111"
    ]
    assert [r["content"] for r in await memory.search_messages(OTHER, "2222")] == ["мой PIN 2222"]
    assert await memory.search_messages(PAVEL.owner_id, "2222") == []


async def test_substring_fallback_and_current_message_excluded(pool: Pool) -> None:
    rows = await seed(pool, PAVEL.owner_id, "код двери: #42-Б", "найди код двери")
    memory = SearchRepository(pool)
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
    assert isinstance(await SearchRepository(pool).search_messages(PAVEL.owner_id, query), list)


async def test_time_stamp_is_not_searched_and_stop_words_are_not_a_query(pool: Pool) -> None:
    await seed(pool, PAVEL.owner_id, "[Текущее время: 2026-11-23 02:54] купил велосипед")
    memory = SearchRepository(pool)
    assert await memory.search_messages(PAVEL.owner_id, "время 2026") == []
    assert len(await memory.search_messages(PAVEL.owner_id, "велосипед")) == 1
    with pytest.raises(StopWordsOnly):
        await memory.search_messages(PAVEL.owner_id, "When was that?")
    with pytest.raises(StopWordsOnly):
        await memory.search_messages(PAVEL.owner_id, "а что было?")


async def test_filters_neighbour_and_number(pool: Pool) -> None:
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(PAVEL.owner_id)
    question = await repo.append_message(conv, "user", "где мой паспорт?")
    await repo.append_message(conv, "assistant", "В верхнем ящике стола.")
    memory = SearchRepository(pool)
    (hit,) = await memory.search_messages(PAVEL.owner_id, "паспорт")
    assert hit["number"] == question["number"]
    assert (hit["next_role"], hit["next_content"]) == ("assistant", "В верхнем ящике стола.")
    assert await memory.search_messages(PAVEL.owner_id, "паспорт", role="assistant") == []
    later = question["created_at"] + timedelta(seconds=1)
    assert await memory.search_messages(PAVEL.owner_id, "паспорт", since=later) == []
    assert await memory.search_messages(PAVEL.owner_id, "паспорт", until=later) != []


def test_query_words_and_prefixes() -> None:
    parsed = parse_query("Где мой кот? ноут* a:* & !b | (c) snake_case_word")
    assert parsed.words == ["Где", "мой", "кот", "ноут", "snake", "case", "word"]
    assert parsed.prefixes == {"ноут"}


def test_term_frequencies_and_bm25_prefer_rare_words_and_short_texts() -> None:
    vector = "'42|кошк':2,5 '42|o''neil':1 '42|wi-fi':3 '42|кошка':7 '42|o''neill':8"
    assert term_frequencies(vector, ["кошк", "o'neil", "wi-fi", "fi", "кош"], frozenset()) == (
        6,
        {"кошк": 2, "o'neil": 1, "wi-fi": 1},
    )
    assert term_frequencies(vector, ["кош", "o'neil"], frozenset({"кош", "o'neil"})) == (
        6,
        {"кош": 3, "o'neil": 2},
    )
    when = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        {"id": 1, "created_at": when, "vector": "'1|melani':1 '1|museum':2"},
        {"id": 2, "created_at": when, "vector": "'1|melani':1"},
        {"id": 3, "created_at": when, "vector": "'1|melani':1 '1|x':2,3,4,5,6,7,8,9 '1|museum':10"},
    ]
    ranked = [row["id"] for _, row in bm25(rows, {"melani": 0.1, "museum": 3.0}, frozenset())]
    assert ranked == [1, 3, 2]  # the rare word wins; the shorter text of the two with it


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


async def test_search_tool_offered_schema(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    await rt.service.handle_message(PAVEL, "привет")
    offered = {t["function"]["name"]: t["function"] for t in llm.last_request()["tools"]}
    params = offered["search_history"]["parameters"]
    # Exactly what the model may send: never a user id (that comes from the turn).
    assert set(params["properties"]) == {"query", "limit", "since", "until", "role", "scope"}
    assert params["required"] == ["query"]
    # The chat-wide search is an explicit choice: the topic is the default (issue 33).
    scope = params["properties"]["scope"]
    assert set(scope["enum"]) == {"topic", "chat"} and scope["default"] == "topic"
    role = params["properties"]["role"]
    assert {"user", "assistant"} <= set(
        role.get("enum") or [e for o in role.get("anyOf", []) for e in o.get("enum", [])]
    )


async def test_search_tool_dates_neighbour_and_common_words(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.script("Сейчас посмотрю.")
    await rt.service.handle_message(PAVEL, "где мой паспорт?")
    llm.script("В верхнем ящике стола.")
    await rt.service.handle_message(PAVEL, "понял, спасибо")
    today = rt.deps.clock().astimezone(rt.settings.zone).date().isoformat()
    calls = [
        {"name": "search_history", "args": {"query": "паспорт", "since": today}},
        {"name": "search_history", "args": {"query": "паспорт", "until": "2001-01-01"}},
        {"name": "search_history", "args": {"query": "when was that?"}},
        {"name": "search_history", "args": {"query": "паспорт", "since": "вчера"}},
    ]
    llm.script({"tool_calls": calls}, "ok")
    await rt.service.handle_message(PAVEL, "что я спрашивал про паспорт?")
    results = [m["content"] for m in llm.last_request()["messages"] if m["role"] == "tool"]
    assert f"- {today} " in results[0] and "#1 user: где мой паспорт?" in results[0]
    assert "next, #2 assistant: Сейчас посмотрю." in results[0]
    assert results[1] == "Nothing found for 'паспорт'."
    assert "only common words" in results[2]
    assert "YYYY-MM-DD" in results[3]  # a readable tool error, never a crash


WORDS = ["кошка", "паспорт", "museum", "nurse", "Kazan", "пароль", "ключ", "trip", "42", "кофе"]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    messages=st.lists(
        st.tuples(st.integers(0, 3), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)),
        min_size=1,
        max_size=25,
    ),
    searches=st.lists(
        st.tuples(st.integers(0, 3), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)),
        min_size=1,
        max_size=8,
    ),
)
async def test_a_search_never_returns_another_owners_message(
    pool: Pool, messages: list[tuple[int, list[str]]], searches: list[tuple[int, list[str]]]
) -> None:
    base = next(OWNER_BLOCKS)
    repo, memory = ConversationRepository(pool), SearchRepository(pool)
    owned: dict[int, int] = {}
    for owner, words in messages:
        conv = await repo.get_or_create_conversation(base + owner)
        row = await repo.append_message(conv, "user", " ".join(words))
        owned[row["id"]] = base + owner
    for owner, words in searches:
        for hit in await memory.search_messages(base + owner, " ".join(words), limit=50):
            assert owned[hit["id"]] == base + owner
            assert any(w.lower() in hit["content"].lower() for w in words)


async def seed_many(pool: Pool, owner: int, count: int, text: str) -> None:
    """Store `count` user messages `text N` for `owner`, a minute apart, oldest first."""
    conv = await ConversationRepository(pool).get_or_create_conversation(owner)
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO messages (conversation_id, number, role, content, created_at) "
            "SELECT %s, g, 'user', %s || ' ' || g, now() - (%s - g) * interval '1 minute' "
            "FROM generate_series(1, %s) g",
            (conv, text, count + 1, count),
        )
        await conn.execute(
            "UPDATE conversations SET next_message_number = %s WHERE id = %s", (count + 1, conv)
        )


@pytest.mark.parametrize("df_cap", [5000, 1000])
async def test_a_frequent_word_finds_the_newest_messages(
    pool: Pool, monkeypatch: Any, df_cap: int
) -> None:
    # 1,200 matches: more than a term's candidates (and, with df_cap 1000, a term too
    # common to count), stored oldest first, so the index returns the oldest first.
    monkeypatch.setattr("src.storage.search_repo.DF_CAP", df_cap)
    await seed_many(pool, PAVEL.owner_id, 1200, "заметка про python")
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(PAVEL.owner_id)
    newest = await repo.append_message(conv, "user", "заметка про python 9999")
    found = await SearchRepository(pool).search_messages(PAVEL.owner_id, "python", limit=5)
    assert found[0]["id"] == newest["id"]
    assert [r["content"] for r in found[1:]] == [
        f"заметка про python {n}" for n in (1200, 1199, 1198, 1197)
    ]


async def test_stop_words_are_those_of_the_querys_language(pool: Pool) -> None:
    eleven, _twelve = await seed(
        pool, PAVEL.owner_id, "Mi hermano cumple once años", "Mi hermano cumple doce años"
    )
    memory = SearchRepository(pool)
    # Spanish ("el", "de" are its stop words): "once" is eleven, not an English stop word.
    found = await memory.search_messages(
        PAVEL.owner_id, "¿Cuándo cumple el hermano de Ana once años?"
    )
    assert found[0]["id"] == eleven["id"]
    with pytest.raises(StopWordsOnly):  # Spanish stop words only
        await memory.search_messages(PAVEL.owner_id, "¿y de el que?")


async def test_a_cjk_word_inside_a_run_of_characters_is_found(pool: Pool) -> None:
    apples, tea = await seed(pool, PAVEL.owner_id, "我昨天在超市买了三个苹果", "今天喝了绿茶")
    memory = SearchRepository(pool)
    assert [r["id"] for r in await memory.search_messages(PAVEL.owner_id, "苹果")] == [apples["id"]]
    assert [r["id"] for r in await memory.search_messages(PAVEL.owner_id, "绿茶")] == [tea["id"]]
    found = await memory.search_messages(PAVEL.owner_id, "超市 苹果")
    assert [r["id"] for r in found] == [apples["id"]]
    assert await memory.search_messages(PAVEL.owner_id, "香蕉") == []
