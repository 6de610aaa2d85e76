"""The squash in PostgreSQL: one transaction, safe next to concurrent appends and squashes."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from src.storage.conversation_repo import ConversationRepository
from src.storage.squash_repo import SquashConflict, SquashRepository
from src.storage.users_repo import UsersRepository

OWNER = 401


async def conversation_with(pool: Any, n: int) -> tuple[uuid.UUID, list[dict[str, Any]]]:
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(OWNER)
    rows = [await repo.append_message(conv, "user", f"m{i}") for i in range(1, n + 1)]
    return conv, rows


async def all_rows(pool: Any, conv: uuid.UUID) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT * FROM messages WHERE conversation_id = %s ORDER BY created_at, id", (conv,)
        )
        return list(await cur.fetchall())


def check_invariants(rows: list[dict[str, Any]]) -> None:
    """Live numbers are unique and increase along the thread."""
    live = [r["number"] for r in rows if r["squashed_at"] is None]
    assert live == sorted(live) and len(live) == len(set(live))


async def test_squash_replaces_the_run_in_place(pool: Any) -> None:
    conv, rows = await conversation_with(pool, 6)
    squashes = SquashRepository(pool)
    result = await squashes.squash(conv, [rows[2]["id"], rows[3]["id"]], " m3+m4 ", "test")
    after = await all_rows(pool, conv)
    live = [(r["number"], r["content"]) for r in after if r["squashed_at"] is None]
    assert live == [(1, "m1"), (2, "m2"), (3, "m3+m4"), (5, "m5"), (6, "m6")]
    # The summary is the model's text: an assistant message, never a system one (issue 12).
    assert result.summary["number"] == 3 and result.summary["role"] == "assistant"
    assert not result.summary["summarized"] and not result.summary["facts_extracted"]
    assert [r["number"] for r in result.replaced] == [3, 4]
    loaded = await ConversationRepository(pool).load_last_messages(conv, 4)
    assert [r["content"] for r in loaded] == ["m2", "m3+m4", "m5", "m6"]
    (log,) = await squashes.log(conv)
    assert log["replaced_numbers"] == [3, 4] and log["summary_message_id"] == result.summary["id"]
    assert await squashes.number_status(conv, 4) == "squashed"
    assert await squashes.number_status(conv, 3) == "live"
    assert await squashes.number_status(conv, 99) is None
    check_invariants(after)


async def test_live_numbers_stay_unique(pool: Any) -> None:
    conv, rows = await conversation_with(pool, 3)
    await SquashRepository(pool).squash(conv, [rows[0]["id"]], "s", "test")
    async with pool.connection() as conn:
        with pytest.raises(psycopg.errors.UniqueViolation):
            await conn.execute(
                "INSERT INTO messages (conversation_id, number, role, content) "
                "VALUES (%s, 2, 'user', 'dup')",
                (conv,),
            )


async def test_a_failed_squash_changes_nothing(pool: Any) -> None:
    conv, rows = await conversation_with(pool, 4)
    squashes = SquashRepository(pool)
    before = await all_rows(pool, conv)
    with pytest.raises(SquashConflict):
        await squashes.squash(conv, [rows[1]["id"], 10**9], "s", "test")
    other = await ConversationRepository(pool).get_or_create_conversation(OWNER + 1)
    with pytest.raises(SquashConflict):  # another conversation's message
        await squashes.squash(other, [rows[1]["id"]], "s", "test")
    with pytest.raises(ValueError):
        await squashes.squash(conv, [rows[1]["id"]], "   ", "test")
    assert await all_rows(pool, conv) == before and await squashes.log(conv) == []


async def test_squash_with_20_concurrent_appends(pool: Any) -> None:
    conv, rows = await conversation_with(pool, 10)
    repo, squashes = ConversationRepository(pool), SquashRepository(pool)
    run = [r["id"] for r in rows[2:6]]  # m3..m6
    async with pool.connection() as conn, conn.transaction():
        await squashes.squash(conv, run, "m3..m6", "test", conn=conn)
        # The squash is not committed yet: 20 appends go through meanwhile, and readers
        # still see the thread as it was, never half a squash.
        appended = await asyncio.wait_for(
            asyncio.gather(*(repo.append_message(conv, "user", f"new{i}") for i in range(20))),
            timeout=20,
        )
        seen = await repo.load_last_messages(conv, 100)
        assert [r["content"] for r in seen][:10] == [f"m{i}" for i in range(1, 11)]
        assert not any(r["content"] == "m3..m6" for r in seen)
    after = await all_rows(pool, conv)
    live = [r for r in after if r["squashed_at"] is None]
    assert [r["content"] for r in live][:7] == ["m1", "m2", "m3..m6", "m7", "m8", "m9", "m10"]
    assert sorted(r["number"] for r in appended) == list(range(11, 31))
    assert {r["content"] for r in live[7:]} == {f"new{i}" for i in range(20)}
    assert len(after) == 10 + 20 + 1
    check_invariants(after)


async def test_squashes_race_appends_and_each_other(pool: Any) -> None:
    conv, rows = await conversation_with(pool, 12)
    repo, squashes = ConversationRepository(pool), SquashRepository(pool)

    async def squash(ids: list[int]) -> Any:
        try:
            return await squashes.squash(conv, ids, "s", "test")
        except SquashConflict as exc:
            return exc

    ids = [r["id"] for r in rows]
    jobs = [squash(ids[1:5]), squash(ids[3:7])]  # overlapping: exactly one may win
    jobs += [repo.append_message(conv, "assistant", f"a{i}") for i in range(20)]
    outcomes = await asyncio.gather(*jobs)
    results = outcomes[:2]
    assert sum(isinstance(r, SquashConflict) for r in results) == 1
    after = await all_rows(pool, conv)
    assert len(await squashes.log(conv)) == 1
    assert len([r for r in after if r["squashed_at"] is not None]) == 4
    assert len(after) == 12 + 20 + 1
    appended = sorted(r["number"] for r in outcomes[2:])
    assert appended == list(range(13, 33))
    check_invariants(after)


async def test_squash_shrinks_a_forget_window(pool: Any) -> None:
    users = UsersRepository(pool)
    await users.get_or_create(OWNER)
    conv, rows = await conversation_with(pool, 5)
    await users.forget(OWNER)
    await users.advance_active_messages_count(OWNER, 3)  # m3..m5 came after /forget
    await SquashRepository(pool).squash(conv, [r["id"] for r in rows[2:4]], "s", "test")
    user = await users.get(OWNER)
    assert user is not None and user["active_messages_count"] == 2  # s, m5: not m2
