"""Texts kept for fact extraction after /new deleted their conversation (`pending_facts`).

Every query names the owner, except the retry job's look for owners with a text due.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from src.storage.base import Conn, Repository, clean_text

INSERT_PENDING = """
INSERT INTO pending_facts (telegram_user_id, source_conversation_id, text, next_attempt_at)
VALUES (%s, %s, %s, %s)
"""
# Owners with a text due, the most overdue first.
SELECT_DUE_OWNERS = """
SELECT telegram_user_id FROM pending_facts WHERE next_attempt_at <= %s
GROUP BY telegram_user_id ORDER BY min(next_attempt_at) LIMIT %s
"""
# Take the owner's due texts for a try. Its back-off is set as it starts: a try in flight
# is not taken again (by this process or another), and one that dies loses nothing.
CLAIM_DUE = """
UPDATE pending_facts SET
    attempts = attempts + 1,
    next_attempt_at = %(now)s
        + make_interval(secs => LEAST(%(cap)s, %(base)s * power(2, attempts)))
WHERE telegram_user_id = %(owner)s AND next_attempt_at <= %(now)s
RETURNING *
"""
POSTPONE = """
UPDATE pending_facts SET next_attempt_at = %s
WHERE telegram_user_id = %s AND next_attempt_at <= %s
"""
DELETE_PENDING = "DELETE FROM pending_facts WHERE id = %s AND telegram_user_id = %s"
SELECT_OWNER_PENDING = """
SELECT * FROM pending_facts WHERE telegram_user_id = %s ORDER BY created_at, id
"""


class PendingFactsRepository(Repository):
    """Kept texts awaiting fact extraction, always scoped to one owner id."""

    async def add(
        self,
        telegram_user_id: int,
        conversation_id: uuid.UUID,
        text: str,
        due: datetime,
        conn: Conn | None = None,
    ) -> None:
        """Keep one batch's text, to be tried from `due` on."""
        params = (telegram_user_id, conversation_id, clean_text(text), due)
        async with self._conn(conn) as c:
            await c.execute(INSERT_PENDING, params)

    async def due_owners(
        self, now: datetime, limit: int = 100, conn: Conn | None = None
    ) -> list[int]:
        """Return owners with a text due at `now`, the most overdue first."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_DUE_OWNERS, (now, limit))
            return [row["telegram_user_id"] for row in await cur.fetchall()]

    async def claim(
        self,
        telegram_user_id: int,
        now: datetime,
        base_seconds: float,
        cap_seconds: float,
        conn: Conn | None = None,
    ) -> list[dict[str, Any]]:
        """Take the owner's texts due at `now` for a try, oldest first: each counts the try
        and waits `base_seconds * 2**tries before` (at most `cap_seconds`) before the next."""
        params = {"owner": telegram_user_id, "now": now, "base": base_seconds, "cap": cap_seconds}
        async with self._conn(conn) as c:
            rows = list(await (await c.execute(CLAIM_DUE, params)).fetchall())
        return sorted(rows, key=lambda r: (r["created_at"], r["id"]))

    async def postpone(
        self, telegram_user_id: int, now: datetime, until: datetime, conn: Conn | None = None
    ) -> None:
        """Move the owner's texts due at `now` to `until`, without counting a try."""
        async with self._conn(conn) as c:
            await c.execute(POSTPONE, (until, telegram_user_id, now))

    async def delete(
        self, telegram_user_id: int, pending_id: int, conn: Conn | None = None
    ) -> bool:
        """Delete one kept text; return whether it was still there."""
        async with self._conn(conn) as c:
            return (await c.execute(DELETE_PENDING, (pending_id, telegram_user_id))).rowcount > 0

    async def of_owner(
        self, telegram_user_id: int, conn: Conn | None = None
    ) -> list[dict[str, Any]]:
        """Return the owner's kept texts, oldest first."""
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_OWNER_PENDING, (telegram_user_id,))
            return list(await cur.fetchall())
