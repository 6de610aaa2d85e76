"""A member's /memory clear also reaches the group's texts kept for fact extraction."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from src.storage.erasure_repo import ErasureRepository, MemberFacts
from src.storage.pending_facts_repo import PendingFactsRepository

GROUP, ANN, BOB = -100_960_000, 9601, 9602


async def pending(pool: Any) -> list[str]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT text FROM pending_facts ORDER BY id")
        return [r["text"] for r in await cur.fetchall()]


async def test_a_members_clear_takes_their_lines_out_of_the_texts_kept_at_new(
    pool: Any,
) -> None:
    """Before: /new kept the group's texts for later extraction with Ann's lines in them,
    and her facts came back after her /memory clear when the text was extracted."""
    kept = PendingFactsRepository(pool)
    conversation, now = uuid.uuid4(), datetime.now(UTC)
    mixed = "\n".join(
        [
            f"[member {ANN}]: Ann: my city is Paris",
            "[assistant]: Noted.",
            f"[member {BOB}]: Bob: I am allergic to nuts",
            f"[shared by member {ANN}]: Carol's birthday is in May",
        ]
    )
    only_ann = f"[member {ANN}]: my job is pilot\n[assistant]: Nice."
    for text in (mixed, only_ann):
        await kept.add(GROUP, conversation, text, now)
    await kept.add(BOB, conversation, f"[user]: I live in Oslo, [member {ANN}]: x", now)
    await ErasureRepository(pool).delete(GROUP, MemberFacts(ANN))
    assert await pending(pool) == [
        f"[assistant]: Noted.\n[member {BOB}]: Bob: I am allergic to nuts",
        f"[user]: I live in Oslo, [member {ANN}]: x",  # another owner's: untouched
    ]
