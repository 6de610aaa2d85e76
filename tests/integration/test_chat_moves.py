"""A group's move to its supergroup's id (src/services/group_moves.py) against real
PostgreSQL: every owner table follows it, rows written for the old id later land under the
new one, moving twice moves nothing, and a turn for the old id runs as the supergroup's."""

from __future__ import annotations

from typing import Any

from src.services.agent_service import Identity
from src.services.group_moves import move_group
from src.storage.chat_moves import NOT_MOVED, ChatMoveRepository
from src.storage.erasure_repo import OWNER_COLUMNS, OWNER_TABLES

OLD, NEW = -4_990_001, -1_004_990_001
TRIGGERS = """
SELECT event_object_table AS table_name FROM information_schema.triggers
WHERE trigger_schema = current_schema() AND trigger_name = 'follow_chat_move'
  AND event_manipulation = 'INSERT'
"""


async def count(pool: Any, query: str, *params: Any) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute(query, params)).fetchone()
        return int(row["n"])


async def test_every_owner_table_follows_a_move(pool: Any) -> None:
    async with pool.connection() as conn:
        tables = await (await conn.execute(OWNER_TABLES, (list(OWNER_COLUMNS),))).fetchall()
        triggered = {r["table_name"] for r in await (await conn.execute(TRIGGERS)).fetchall()}
    owned = {r["table_name"] for r in tables} - NOT_MOVED
    assert owned and owned <= triggered


async def test_rows_written_for_the_old_id_after_the_move_land_under_the_new_one(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    rt = await runtime_factory()
    llm.script("Noted.")
    await rt.service.handle_message(Identity(OLD, sender_id=7), "the code word is Zephyr")
    await rt.service.drain()
    moves = ChatMoveRepository(pool)
    moved = await moves.move(OLD, NEW)
    assert {"users", "conversations", "messages"} <= set(moved)
    assert await moves.move(OLD, NEW) == {}  # the upgrade told again
    assert await moves.moved_to(OLD) == NEW
    # Written late for the old id (a usage row in the background, a fact of another
    # process's memory work): each follows the move.
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO llm_calls (owner_id, purpose, model) VALUES (%s, 'reply', 'm')", (OLD,)
        )
        await conn.execute(
            "INSERT INTO facts (telegram_user_id, key, value, type, importance)"
            " VALUES (%s, 'colour', 'teal', 'fact', 5)",
            (OLD,),
        )
    for table, column in (("llm_calls", "owner_id"), ("facts", "telegram_user_id")):
        query = f"SELECT count(*) AS n FROM {table} WHERE {column} = %s"
        assert await count(pool, query, OLD) == 0, table
        assert await count(pool, query, NEW) >= 1, table


async def test_a_turn_for_the_old_id_after_the_move_is_the_supergroups(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    rt = await runtime_factory()
    llm.script("Noted.", "It is Zephyr.")
    await rt.service.handle_message(Identity(OLD, sender_id=7), "the code word is Zephyr")
    await rt.service.drain()
    await move_group(rt.service, OLD, NEW)
    # An update of the old chat that waited behind the move: its turn is the supergroup's,
    # in the group's one conversation, with its history.
    await rt.service.handle_message(Identity(OLD, sender_id=7), "what is the code word?")
    assert "the code word is Zephyr" in str(llm.requests[-1]["messages"])
    query = "SELECT count(*) AS n FROM conversations WHERE telegram_user_id = %s"
    assert await count(pool, query, NEW) == 1
    assert await count(pool, query, OLD) == 0
    query = "SELECT count(*) AS n FROM messages WHERE owner_id = %s"
    assert await count(pool, query, NEW) == 4
