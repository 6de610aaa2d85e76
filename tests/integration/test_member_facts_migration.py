"""Migration 0027 (issue 33, members as themselves): the facts a group kept before it are
the group's own (member 0), with their history; a private chat's stay the user's; nothing
is lost, and a member's fact of the same key is kept beside the group's."""

from __future__ import annotations

import shutil
from pathlib import Path

from src.storage.memory_repo import MemoryRepository
from src.storage.migrations import SQL_DIR, migrate
from src.storage.pg_client import make_pool

GROUP, ANN = -100_777, 777


async def test_migration_0027_keeps_a_groups_facts_as_the_groups(
    fresh_schema: str, tmp_path: Path
) -> None:
    for path in sorted(SQL_DIR.glob("00*.sql")):
        if int(path.name[:4]) < 27:
            shutil.copy(path, tmp_path / path.name)
    pool = make_pool(fresh_schema, 1, 2)
    await pool.open()
    try:
        await migrate(pool, tmp_path)
        old = MemoryRepository(pool)
        async with pool.connection() as conn:
            for owner, key, value in (
                (GROUP, "project", "Apollo"),
                (GROUP, "project", "Gemini"),  # the old value becomes history
                (GROUP, "city", "Paris"),
                (ANN, "city", "Kazan"),
            ):
                await conn.execute(
                    "UPDATE facts SET valid_to = now() WHERE telegram_user_id = %s"
                    " AND key = %s AND valid_to IS NULL",
                    (owner, key),
                )
                await conn.execute(
                    "INSERT INTO facts (telegram_user_id, key, value, type, importance)"
                    " VALUES (%s, %s, %s, 'fact', 5)",
                    (owner, key, value),
                )
        applied = await migrate(pool)  # 0027, and whatever came after it
        assert applied[0] == "0027_member_facts.sql"
        memory = MemoryRepository(pool)
        group = {f["key"]: f for f in await memory.facts_with_previous(GROUP)}
        assert {k: f["value"] for k, f in group.items()} == {"project": "Gemini", "city": "Paris"}
        assert group["project"]["previous_value"] == "Apollo"
        assert all(f["member_id"] == 0 for f in group.values())
        assert [f["value"] for f in await old.list_facts(ANN)] == ["Kazan"]
        # A member's city beside the group's: neither replaces the other.
        await memory.upsert_fact(GROUP, "city", "Oslo", member=ANN)
        assert "Oslo" not in [f["value"] for f in await memory.list_facts(GROUP)]
        both = await memory.list_facts(GROUP, members=[0, ANN])
        assert sorted((f["member_id"], f["value"]) for f in both if f["key"] == "city") == [
            (0, "Paris"),
            (ANN, "Oslo"),
        ]
    finally:
        await pool.close()
