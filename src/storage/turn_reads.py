"""Everything a turn reads before the model call, in one pipelined round trip.

The owner's row (seed 000's counter), the conversation (running summary, messages
awaiting fact extraction), the last stored messages, the facts and the compacts of
previous sessions are independent reads: they are sent together in pipeline mode and
their results read back after one sync, over one pool checkout. The statements are the
repositories' own.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from src.storage.conversation_repo import LOAD_LAST_MESSAGES, SELECT_CONVERSATION_WITH_PENDING
from src.storage.memory_repo import SELECT_COMPACTS, SELECT_FACTS
from src.storage.users_repo import SELECT_USER

Row = dict[str, Any]


@dataclass(frozen=True)
class TurnReads:
    """What one turn read: rows as the repositories return them."""

    user: Row | None
    conversation: Row | None
    messages: list[Row]
    """The last live messages, oldest first."""
    facts: list[Row]
    """Most important first."""
    compacts: list[Row]
    """Newest first."""


async def read_turn(
    conn: Any,
    owner_id: int,
    conversation_id: uuid.UUID,
    *,
    messages: int,
    facts_every: int,
    facts: int,
    compacts: int,
) -> TurnReads:
    """Read a turn's inputs over `conn` in one round trip (see the module's doc)."""
    async with conn.pipeline():
        cursors = [
            await conn.execute(SELECT_USER, (owner_id,)),
            await conn.execute(SELECT_CONVERSATION_WITH_PENDING, (facts_every, conversation_id)),
            await conn.execute(LOAD_LAST_MESSAGES, (conversation_id, max(messages, 0))),
            await conn.execute(SELECT_FACTS, (owner_id, max(facts, 0))),
            await conn.execute(SELECT_COMPACTS, (owner_id, max(compacts, 0))),
        ]
        user = await cursors[0].fetchone()
        conversation = await cursors[1].fetchone()
        rows = [list(await cur.fetchall()) for cur in cursors[2:]]
    return TurnReads(user, conversation, rows[0], rows[1], rows[2])
