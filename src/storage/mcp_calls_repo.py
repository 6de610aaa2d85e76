"""The record of every MCP tool call (sql/0036_mcp_calls.sql): usage, and calls made once.

A call is claimed before it is sent and finished after it, each in a statement of its
own (committed at once, not with the turn's reply): a turn that dies after the call, or
during it, finds the claim when it runs again. A claim left by a call that never reached
the server (`down`) is taken over.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from src.storage.base import Conn, Repository, clean_text

# Claimed, or a claim of a call that was never sent taken over: the row's id comes back.
# Otherwise nothing does, and the call was made already (see RECORDED).
CLAIM = """
INSERT INTO mcp_calls (owner_id, message_id, call_key, server, tool)
VALUES (%(owner)s, %(message)s, %(key)s, %(server)s, %(tool)s)
ON CONFLICT (message_id, call_key) DO UPDATE SET outcome = 'running', at = now(), ms = NULL
    WHERE mcp_calls.outcome = 'down'
RETURNING id
"""
RECORDED = """
SELECT outcome, result FROM mcp_calls WHERE message_id = %s AND call_key = %s
"""
FINISH = "UPDATE mcp_calls SET outcome = %s, ms = %s, result = %s WHERE id = %s"
# A call outside any turn's stored message (none is known): counted, never looked up.
ADD = """
INSERT INTO mcp_calls (owner_id, call_key, server, tool, outcome, ms, result)
VALUES (%(owner)s, %(key)s, %(server)s, %(tool)s, %(outcome)s, %(ms)s, %(result)s)
"""
SUMS = """
SELECT server, tool, outcome, count(*) AS calls, avg(ms) AS avg_ms FROM mcp_calls
WHERE at >= %(since)s AND (%(owner)s::bigint IS NULL OR owner_id = %(owner)s)
GROUP BY server, tool, outcome ORDER BY server, tool, outcome
"""


@dataclass(frozen=True)
class Recorded:
    """A call made before: how it ended, and what the model was given."""

    outcome: str
    """ok, error, timeout, stopped, down; `running`: its answer never came back."""
    result: str | None


class McpCallRepository(Repository):
    """Rows of `mcp_calls`."""

    async def claim(
        self, owner: int, message: int, key: str, server: str, tool: str
    ) -> int | Recorded:
        """Claim the call `key` of the turn of stored message `message`: its row's id
        when it is to be made now, else how it went when it was made before."""
        params = {"owner": owner, "message": message, "key": key, "server": server, "tool": tool}
        async with self.pool.connection() as conn:
            row = await (await conn.execute(CLAIM, params)).fetchone()
            if row is not None:
                return int(row["id"])
            found = await self._recorded(conn, message, key)
        assert found is not None  # the conflict was with this row; calls are never deleted
        return found

    async def recorded(self, message: int, key: str) -> Recorded | None:
        """Return how the call `key` of the turn of `message` went, or None (not made)."""
        async with self.pool.connection() as conn:
            return await self._recorded(conn, message, key)

    @staticmethod
    async def _recorded(conn: Conn, message: int, key: str) -> Recorded | None:
        row = await (await conn.execute(RECORDED, (message, key))).fetchone()
        return None if row is None else Recorded(row["outcome"], row["result"])

    async def finish(self, call_id: int, outcome: str, ms: float, result: str) -> None:
        """Record how the claimed call `call_id` ended and what the model was given."""
        async with self.pool.connection() as conn:
            await conn.execute(FINISH, (outcome, ms, clean_text(result), call_id))

    async def add(
        self, owner: int, key: str, server: str, tool: str, outcome: str, ms: float, result: str
    ) -> None:
        """Record a call of no stored turn (counted in usage, never looked up)."""
        params = {
            "owner": owner,
            "key": key,
            "server": server,
            "tool": tool,
            "outcome": outcome,
            "ms": ms,
            "result": clean_text(result),
        }
        async with self.pool.connection() as conn:
            await conn.execute(ADD, params)

    async def sums(self, since: datetime, owner: int | None = None) -> list[dict[str, Any]]:
        """Return calls per server, tool and outcome since `since` (of one owner, or all),
        with their average milliseconds."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(SUMS, {"since": since, "owner": owner})
            return list(await cur.fetchall())
