"""The conversation store against a real PostgreSQL (seed 004's repository semantics)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from src.storage.conversation_repo import ConversationRepository
from src.storage.migrations import applied_versions, discover, migrate
from src.storage.pg_client import make_pool
from src.storage.squash_repo import SquashRepository
from src.storage.users_repo import UsersRepository

Pool = AsyncConnectionPool[Any]


async def test_get_or_create_returns_latest(pool: Pool) -> None:
    repo = ConversationRepository(pool)
    first = await repo.get_or_create_conversation(1)
    assert await repo.get_or_create_conversation(1) == first
    newer = await repo.create_new_conversation(1)
    assert newer != first
    assert await repo.get_or_create_conversation(1) == newer


@pytest.mark.server
async def test_get_or_create_concurrent_makes_one(pool: Pool) -> None:
    repo = ConversationRepository(pool)
    ids = await asyncio.gather(*(repo.get_or_create_conversation(7) for _ in range(10)))
    assert len(set(ids)) == 1
    assert len(await repo.conversation_ids(7)) == 1


async def test_append_and_load_chronological(pool: Pool) -> None:
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(2)
    for i, role in enumerate(["user", "assistant", "tool", "system"] * 10):
        row = await repo.append_message(conv, role, f"m{i}")
        assert row["number"] == i + 1
    last = await repo.load_last_messages(conv, limit=30)
    assert [m["content"] for m in last] == [f"m{i}" for i in range(10, 40)]
    assert [m["role"] for m in last][:4] == ["tool", "system", "user", "assistant"]
    assert all(m["created_at"].tzinfo is not None for m in last)
    assert await repo.load_last_messages(conv, limit=0) == []
    assert len(await repo.load_last_messages(conv, limit=100)) == 40


async def test_meta_json_is_cleaned_recursively(pool: Pool) -> None:
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(3)
    meta = {"tool_calls": [{"args": {"q\x00": ["a\x00b", "lone \ud83d", {"n": 1, "ok": True}]}}]}
    row = await repo.append_message(conv, "assistant", "x\x00y", meta)
    assert row["content"] == "xy"
    assert row["meta"] == {"tool_calls": [{"args": {"q": ["ab", "lone ?", {"n": 1, "ok": True}]}}]}


async def test_ordering_ties_broken_by_id(pool: Pool) -> None:
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(3)
    rows = [await repo.append_message(conv, "user", f"t{i}") for i in range(5)]
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE messages SET created_at = '2024-01-01T00:00:00Z' WHERE conversation_id = %s",
            (conv,),
        )
    loaded = await repo.load_last_messages(conv, limit=3)
    assert [m["id"] for m in loaded] == [r["id"] for r in rows[2:]]


async def test_unknown_role_rejected(pool: Pool) -> None:
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(4)
    with pytest.raises(ValueError, match="role"):
        await repo.append_message(conv, "robot", "x")
    with pytest.raises(LookupError):
        await repo.append_message(uuid.uuid4(), "user", "x")


async def test_nul_and_huge_content(pool: Pool) -> None:
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(5)
    await repo.append_message(conv, "user", "a\x00b\x00c")
    big = "я" * 100_000
    await repo.append_message(conv, "user", big)
    await repo.append_message(conv, "user", "bad \ud800 surrogate")
    got = await repo.load_last_messages(conv)
    assert got[0]["content"] == "abc"
    assert got[1]["content"] == big
    assert got[2]["content"].startswith("bad ") and "\ud800" not in got[2]["content"]


async def test_new_conversation_touches_only_that_user(pool: Pool) -> None:
    repo = ConversationRepository(pool)
    a = await repo.get_or_create_conversation(10)
    b = await repo.get_or_create_conversation(11)
    await repo.append_message(a, "user", "alice")
    await repo.append_message(b, "user", "bob")
    fresh = await repo.create_new_conversation(10)
    assert await repo.conversation_ids(10) == [fresh]
    assert await repo.get_conversation(a) is None
    assert await repo.load_last_messages(fresh) == []
    assert [m["content"] for m in await repo.load_last_messages(b)] == ["bob"]
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM messages WHERE conversation_id = %s", (a,)
        )
        assert (await cur.fetchone())["n"] == 0


async def test_clear_conversation_messages(pool: Pool) -> None:
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(12)
    for i in range(3):
        await repo.append_message(conv, "user", str(i))
    assert await repo.clear_conversation_messages(conv) == 3
    assert await repo.load_last_messages(conv) == []
    assert await repo.get_conversation(conv) is not None


@pytest.mark.server
async def test_concurrent_appends_unique_gapless_numbers(pool: Pool) -> None:
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(13)
    rows = await asyncio.gather(*(repo.append_message(conv, "user", f"c{i}") for i in range(50)))
    assert sorted(r["number"] for r in rows) == list(range(1, 51))
    assert await repo.count_messages(conv) == 50
    loaded = await repo.load_last_messages(conv, limit=50)
    assert {m["content"] for m in loaded} == {f"c{i}" for i in range(50)}


async def test_max_storage_trims_only_what_memory_is_done_with(pool: Pool) -> None:
    repo = ConversationRepository(pool, max_storage=5)
    conv = await repo.get_or_create_conversation(14)
    rows = [await repo.append_message(conv, "user", str(i)) for i in range(8)]
    # Nothing was summarized or fact-extracted yet: nothing may go (issue 12).
    assert await repo.count_messages(conv) == 8
    await repo.fold_into_summary(conv, "s", [r["id"] for r in rows[:4]])
    await repo.append_message(conv, "user", "8")
    assert await repo.count_messages(conv) == 9  # summarized, but facts still pending
    await repo.mark_facts_extracted(conv, [r["id"] for r in rows[:2]])
    await repo.append_message(conv, "user", "9")
    loaded = await repo.load_last_messages(conv, 20)
    assert [m["content"] for m in loaded] == [str(i) for i in range(2, 10)]


async def test_max_storage_keeps_squash_originals(pool: Pool) -> None:
    repo = ConversationRepository(pool, max_storage=3)
    conv = await repo.get_or_create_conversation(16)
    rows = [await repo.append_message(conv, "user", str(i)) for i in range(4)]
    await SquashRepository(pool).squash(conv, [rows[0]["id"], rows[1]["id"]], "0+1", "model")
    live = await repo.load_last_messages(conv, 20)
    async with pool.connection() as c:
        await c.execute("UPDATE messages SET summarized = true, facts_extracted = true")
    for i in range(4, 8):
        await repo.append_message(conv, "user", str(i))
    async with pool.connection() as c:
        cur = await c.execute("SELECT content FROM messages WHERE squashed_at IS NOT NULL")
        assert sorted(r["content"] for r in await cur.fetchall()) == ["0", "1"]
    # "4" came after the marks: not summarized yet, so it stays beyond the limit.
    assert [m["content"] for m in await repo.load_last_messages(conv, 20)] == ["4", "5", "6", "7"]
    assert live[0]["content"] == "0+1"


async def test_summary_and_end(pool: Pool) -> None:
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(15)
    rows = [await repo.append_message(conv, "user", str(i)) for i in range(3)]
    await repo.fold_into_summary(conv, "s1", [rows[0]["id"]])
    await repo.fold_into_summary(conv, "s2", [rows[1]["id"]])
    row = await repo.get_conversation(conv)
    assert row is not None and row["summary"] == "s2"
    marks = [m["summarized"] for m in await repo.load_last_messages(conv, 3)]
    assert marks == [True, True, False]
    await repo.end_conversation(conv)
    row = await repo.get_conversation(conv)
    assert row is not None and row["ended_at"] is not None


async def test_users_repository(pool: Pool) -> None:
    users = UsersRepository(pool)
    u = await users.get_or_create(20, "alice", "Alice", "ru")
    assert u["active_messages_count"] is None and u["remind_of_yourself"] == "1"
    u = await users.get_or_create(20, None, None, None)
    assert u["username"] == "alice"
    await users.advance_active_messages_count(20, 2)
    assert (await users.get(20))["active_messages_count"] is None
    await users.forget(20)
    row = await users.get(20)
    assert row["active_messages_count"] == 0 and row["remind_of_yourself"] == "0"
    await users.advance_active_messages_count(20, 2)
    assert (await users.get(20))["active_messages_count"] == 2
    await users.set_active_messages_count(20, None)
    await users.set_reminders(20, True)
    row = await users.get(20)
    assert row["active_messages_count"] is None and row["remind_of_yourself"] == "1"
    assert await users.get(21) is None


async def test_migrations_idempotent(pool: Pool) -> None:
    assert await migrate(pool) == []
    versions = [r["version"] for r in await applied_versions(pool)]
    assert versions == [m.version for m in discover()]


@pytest.mark.server
async def test_migrations_concurrent(fresh_schema: str) -> None:
    pools = [make_pool(fresh_schema, 1, 2) for _ in range(3)]
    for p in pools:
        await p.open()
    try:
        results = await asyncio.gather(*(migrate(p) for p in pools))
        assert sorted(len(r) for r in results) == [0, 0, len(discover())]
        assert len(await applied_versions(pools[0])) == len(discover())
    finally:
        for p in pools:
            await p.close()
