"""search_history ranks what a question asks for: the day it names, before the user's
own earlier askings of it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from psycopg_pool import AsyncConnectionPool

from src.services.agent_service import Identity
from src.storage.conversation_repo import ConversationRepository
from src.storage.search_repo import SearchRepository

Pool = AsyncConnectionPool[Any]
OWNER = 7_150_001
ZONE = ZoneInfo("Europe/Moscow")
# A Friday evening; "last Tuesday" is 2026-03-10.
NOW = datetime(2026, 3, 13, 20, 0, tzinfo=ZONE)
SET_TIME = "UPDATE messages SET created_at = %s WHERE id = %s"


async def seed(pool: Pool, owner: int, *turns: tuple[datetime, str, str]) -> list[int]:
    """Store (time, role, text) turns in one conversation; return their ids."""
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(owner)
    ids = []
    for when, role, text in turns:
        row = await repo.append_message(conv, role, text)
        async with pool.connection() as conn:
            await conn.execute(SET_TIME, (when, row["id"]))
        ids.append(int(row["id"]))
    return ids


async def test_a_date_the_question_names_ranks_that_days_messages_first(pool: Pool) -> None:
    tuesday = NOW - timedelta(days=3)
    ids = await seed(
        pool,
        OWNER,
        (NOW - timedelta(days=40), "user", "Cooked pasta with pasta sauce, pasta again"),
        (tuesday, "user", "Made a mushroom risotto tonight, pasta was boring"),
        (NOW - timedelta(days=1), "user", "Pasta for lunch at work"),
    )
    memory = SearchRepository(pool)
    found = await memory.search_messages(OWNER, "what pasta did I cook last Tuesday?", now=NOW)
    assert found[0]["id"] == ids[1]
    # The same words in Russian ("во вторник") and with the range given outright agree.
    found = await memory.search_messages(OWNER, "pasta во вторник", now=NOW)
    assert found[0]["id"] == ids[1]
    # Without the moment of the question no date is read: the best text match wins, and
    # the date's words are searched as words.
    found = await memory.search_messages(OWNER, "what pasta did I cook last Tuesday?")
    assert found[0]["id"] == ids[0]
    # A range the caller gives is kept as given.
    found = await memory.search_messages(
        OWNER, "pasta last Tuesday", since=NOW - timedelta(days=1), now=NOW
    )
    assert [r["id"] for r in found] == [ids[2]]


async def test_the_users_earlier_questions_do_not_crowd_out_the_answer(pool: Pool) -> None:
    start = NOW - timedelta(days=60)
    turns = [(start, "user", "Tom: we adopted a beagle puppy, the kids named him Biscuit")]
    turns.append((start + timedelta(seconds=5), "assistant", "Noted."))
    for n in range(12):
        at = start + timedelta(days=n + 1)
        turns.append((at, "user", "Remind me, what is the name of Tom's new puppy?"))
        turns.append((at + timedelta(seconds=5), "assistant", "I'm not sure, let me check."))
        turns.append(
            (at + timedelta(minutes=1), "user", f"Maya: did Tom walk the puppy on day {n}?")
        )
    ids = await seed(pool, OWNER, *turns)
    memory = SearchRepository(pool)
    found = await memory.search_messages(OWNER, "What is the name of Tom's new puppy?", limit=5)
    # The answer first, though each earlier asking repeats every word of the question;
    # the askings come after every other hit.
    assert found[0]["id"] == ids[0]
    asked = [r for r in found if r["content"].startswith("Remind me")]
    assert not asked
    found = await memory.search_messages(OWNER, "What is the name of Tom's new puppy?", limit=50)
    kinds = ["asked" if r["content"].startswith("Remind me") else "other" for r in found]
    assert kinds == sorted(kinds, key=lambda k: k == "asked") and "asked" in kinds


async def test_the_tool_reads_a_date_relative_to_the_turn(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    user = Identity(7_150_002, "anna", "Anna", "en")
    llm.script("ok")
    await rt.service.handle_message(user, "pasta with tomato sauce again, pasta pasta pasta")
    llm.script("ok")
    await rt.service.handle_message(user, "made a mushroom risotto tonight, pasta was boring")
    yesterday = rt.deps.clock() - timedelta(days=1)
    async with rt.pool.connection() as conn:
        await conn.execute(
            "UPDATE messages SET created_at = %s WHERE content LIKE %s",
            (yesterday, "%mushroom risotto%"),
        )
    calls = [{"name": "search_history", "args": {"query": "pasta yesterday", "limit": 1}}]
    llm.script({"tool_calls": calls}, "ok")
    await rt.service.handle_message(user, "what did I cook yesterday?")
    results = [m["content"] for m in llm.last_request()["messages"] if m["role"] == "tool"]
    assert "mushroom risotto" in results[0]


async def test_a_question_that_tells_is_found_and_the_users_own_search_goes_last(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory()
    user = Identity(7_150_003, "anna", "Anna", "en")
    for text in (
        "Maya: did you get to the climbing gym with Tom on Sunday?",
        "Tom: yes, bouldering all afternoon",
    ):
        llm.script("ok")
        await rt.service.handle_message(user, text)
    # The user asks the bot about the chat: the turn searches the history (stored with
    # its tool call), and that message is the user asking, not what the chat holds.
    calls = [{"name": "search_history", "args": {"query": "Tom climbing Sunday"}}]
    llm.script({"tool_calls": calls}, "Tom went bouldering.")
    await rt.service.handle_message(user, "Remind me about Tom climbing on Sunday")
    found = await rt.deps.search.search_messages(
        user.owner_id, "Where did Tom go climbing on Sunday?"
    )
    texts = [r["content"] for r in found]
    # The friend's question holds the answer and is first, a question or not; the user's
    # own search, though it matches as many words, comes after every other hit.
    assert "Maya: did you get to the climbing gym" in texts[0]
    assert "Remind me about Tom climbing" in texts[-1]
