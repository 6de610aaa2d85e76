"""search_history for a question that names a time and nothing else ("what happened
yesterday?", "что было вчера?"): the messages of that time, newest first, within the
owner and the scope; before, such a question was refused as common words only."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from psycopg_pool import AsyncConnectionPool

from src.services.agent_service import Identity
from src.storage.conversation_repo import ConversationRepository
from src.storage.search_bm25 import StopWordsOnly
from src.storage.search_day import IN_RANGE
from src.storage.search_repo import SearchRepository

Pool = AsyncConnectionPool[Any]
OWNER = 7_160_001
OTHER = 7_160_002
ZONE = ZoneInfo("Europe/Moscow")
# A Friday evening: yesterday is Thursday 2026-03-12, last Tuesday 2026-03-10.
NOW = datetime(2026, 3, 13, 20, 0, tzinfo=ZONE)
YESTERDAY = datetime(2026, 3, 12, tzinfo=ZONE)
SET_TIME = "UPDATE messages SET created_at = %s WHERE id = %s"
PAVEL = Identity(7_160_003, "pavel", "Pavel", "ru")


async def seed(
    pool: Pool, owner: int, turns: list[tuple[datetime, str, str]], topic: int = 0
) -> tuple[uuid.UUID, list[int]]:
    """Store (time, role, text) turns in the owner's conversation of `topic`."""
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(owner, topic=topic)
    ids = []
    for when, role, text in turns:
        row = await repo.append_message(conv, role, text)
        async with pool.connection() as conn:
            await conn.execute(SET_TIME, (when, row["id"]))
        ids.append(int(row["id"]))
    return conv, ids


async def test_a_date_alone_lists_that_days_messages_newest_first(pool: Pool) -> None:
    _conv, ids = await seed(
        pool,
        OWNER,
        [
            (NOW - timedelta(days=3, hours=2), "user", "Tom: cooked a mushroom risotto"),
            (YESTERDAY - timedelta(minutes=1), "user", "late night: finished the book"),
            (YESTERDAY + timedelta(hours=9), "user", "Maya: my sister arrives on Sunday"),
            (YESTERDAY + timedelta(hours=9, seconds=5), "assistant", "Noted."),
            (YESTERDAY + timedelta(hours=18), "user", "Tom: the dentist said all is fine"),
            (NOW - timedelta(hours=1), "user", "what happened yesterday?"),
        ],
    )
    topic_conv, topic_ids = await seed(
        pool, OWNER, [(YESTERDAY + timedelta(hours=12), "user", "Work: the report is sent")], 7
    )
    await seed(pool, OTHER, [(YESTERDAY + timedelta(hours=10), "user", "another owner's day")])
    memory = SearchRepository(pool)
    day = [ids[4], topic_ids[0], ids[3], ids[2]]  # newest first, every conversation

    asked = ("what happened yesterday?", "что было вчера?", "What did we talk about yesterday")
    for query in asked:
        found = await memory.find(OWNER, query, exclude_id=ids[5], now=NOW)
        assert [r["id"] for r in found.rows] == day, query
        assert found.span is not None
        assert (found.span.since, found.span.until) == (YESTERDAY, YESTERDAY + timedelta(days=1))
    # The question itself is yesterday's too when not excluded; the other owner never.
    found = await memory.search_messages(OWNER, "вчера", now=NOW + timedelta(days=1))
    assert [r["id"] for r in found] == [ids[5]]
    # Last Tuesday's, the user's only, the scope's only, the newest `limit`.
    found = await memory.find(OWNER, "What did I say last Tuesday?", now=NOW)
    assert [r["id"] for r in found.rows] == [ids[0]]
    found = await memory.find(OWNER, "что было вчера?", role="assistant", now=NOW)
    assert [r["id"] for r in found.rows] == [ids[3]]
    found = await memory.find(OWNER, "что было вчера?", scope=[topic_conv], now=NOW)
    assert [r["id"] for r in found.rows] == [topic_ids[0]]
    found = await memory.find(OWNER, "what happened yesterday?", limit=2, now=NOW)
    assert [r["id"] for r in found.rows] == day[:2]


async def test_other_searches_are_unchanged(pool: Pool) -> None:
    _conv, ids = await seed(
        pool,
        OWNER,
        [
            (NOW - timedelta(days=30), "user", "Tom: the dentist was horrible"),
            (YESTERDAY + timedelta(hours=9), "user", "Maya: my sister arrives on Sunday"),
            (YESTERDAY + timedelta(hours=18), "user", "Tom: the dentist said all is fine"),
        ],
    )
    memory = SearchRepository(pool)
    # Something to search for besides the date: a ranked search, not a listing.
    found = await memory.find(OWNER, "what did the dentist say yesterday?", now=NOW)
    assert found.span is None and found.rows[0]["id"] == ids[2]
    # Common words with a range given outright: that range's messages.
    found = await memory.find(OWNER, "что было", since=YESTERDAY, until=NOW, now=NOW)
    assert found.span is not None and [r["id"] for r in found.rows] == [ids[2], ids[1]]
    # Common words and no time: still refused, with or without the question's moment.
    with pytest.raises(StopWordsOnly):
        await memory.find(OWNER, "что было?", now=NOW)
    with pytest.raises(StopWordsOnly):
        await memory.search_messages(OWNER, "what was it")


async def test_the_listing_reads_the_owners_time_index(pool: Pool) -> None:
    params = {
        "user": OWNER,
        "since": YESTERDAY,
        "until": None,
        "roles": ["user", "assistant"],
        "exclude": 0,
        "scope": None,
        "limit": 10,
    }
    async with pool.connection() as conn:
        await conn.execute("SET LOCAL enable_seqscan = off")
        cur = await conn.execute("EXPLAIN " + IN_RANGE, params)
        plan = "\n".join(r["QUERY PLAN"] for r in await cur.fetchall())
    assert "messages_owner_time_idx" in plan and "Sort" not in plan, plan


async def test_the_tool_says_it_lists_the_days_messages(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.script("Хорошо.")
    await rt.service.handle_message(PAVEL, "купил билеты в Казань")
    today = rt.deps.clock().astimezone(rt.settings.zone).date().isoformat()
    calls = [
        {"name": "search_history", "args": {"query": "что было сегодня?"}},
        {"name": "search_history", "args": {"query": "what did I say today?", "role": "user"}},
        {"name": "search_history", "args": {"query": "что было", "until": "2001-01-01"}},
    ]
    llm.script({"tool_calls": calls}, "ok")
    await rt.service.handle_message(PAVEL, "напомни, что было сегодня?")
    results = [m["content"] for m in llm.last_request()["messages"] if m["role"] == "tool"]
    assert results[0].startswith(f"The messages on {today}, 2 of them, newest first:\n")
    assert results[0].index("assistant: Хорошо.") < results[0].index("user: купил билеты")
    assert "напомни" not in results[0]  # the question being answered is not listed
    assert results[1].startswith(f"The messages on {today}, 1 of them, newest first:\n")
    assert results[2] == "No messages to 2001-01-01."


async def test_the_listing_skips_empty_tool_call_lines(runtime_factory: Any, llm: Any) -> None:
    """Before: a turn's assistant messages that only call tools (no text) were listed as
    empty lines, and used up the limit."""
    rt = await runtime_factory()
    llm.script("Хорошо.")
    await rt.service.handle_message(PAVEL, "купил билеты в Казань")
    view = {"tool_calls": [{"name": "view_thread", "args": {}}]}
    llm.script(view, view, view, "Вот переписка.")
    assert (await rt.service.handle_message(PAVEL, "покажи переписку")).ok
    calls = [{"name": "search_history", "args": {"query": "что было сегодня?", "limit": 3}}]
    llm.script({"tool_calls": calls}, "ok")
    await rt.service.handle_message(PAVEL, "напомни, что было сегодня?")
    result = [m["content"] for m in llm.last_request()["messages"] if m["role"] == "tool"][-1]
    assert result.startswith("The messages on "), result
    lines = result.splitlines()[1:]
    assert [line.split(": ", 1)[1] for line in lines] == [
        "Вот переписка.",
        "покажи переписку",
        "Хорошо.",
    ], result
