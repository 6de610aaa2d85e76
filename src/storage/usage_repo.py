"""Model calls (`llm_calls`): one row per call, and the sums /usage and budgets read."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from src.storage.base import Conn, Repository, clean_text

# Committed without waiting for its WAL flush (synchronous_commit off for this statement
# only): a crash may lose the last few records, never a turn's time.
INSERT_CALL = """
INSERT INTO llm_calls (owner_id, sender_id, conversation_id, turn_id, purpose, model,
    input_tokens, cached_tokens, output_tokens, audio_seconds, estimated, latency_ms, status,
    error_class)
SELECT %(owner_id)s, %(sender_id)s, %(conversation_id)s, %(turn_id)s, %(purpose)s, %(model)s,
    %(input_tokens)s, %(cached_tokens)s, %(output_tokens)s, %(audio_seconds)s,
    %(estimated)s, %(latency_ms)s, %(status)s, %(error_class)s
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
"""
# The sums of a set of calls, by model (prices are per model). A row may count several
# calls (`calls`): /erase collapses an owner's calls into daily totals.
SUMS = """
sum(calls)::bigint AS calls, sum(input_tokens)::bigint AS input_tokens,
sum(cached_tokens)::bigint AS cached_tokens, sum(output_tokens)::bigint AS output_tokens,
coalesce(sum(audio_seconds), 0)::float AS audio_seconds,
coalesce(sum(calls) FILTER (WHERE estimated), 0)::bigint AS estimated,
coalesce(sum(calls) FILTER (WHERE status = 'error'), 0)::bigint AS errors
"""
# A person's (or group's) sums by model since the month's start, and since the day's:
# the calls of their own chats and those they made happen in groups (sender_id).
SPENT = """
SELECT model,
    coalesce(sum(input_tokens) FILTER (WHERE at >= %(day)s), 0)::bigint AS day_input,
    coalesce(sum(cached_tokens) FILTER (WHERE at >= %(day)s), 0)::bigint AS day_cached,
    coalesce(sum(output_tokens) FILTER (WHERE at >= %(day)s), 0)::bigint AS day_output,
    coalesce(sum(audio_seconds) FILTER (WHERE at >= %(day)s), 0)::float AS day_audio,
    sum(input_tokens)::bigint AS month_input, sum(cached_tokens)::bigint AS month_cached,
    sum(output_tokens)::bigint AS month_output,
    coalesce(sum(audio_seconds), 0)::float AS month_audio
FROM (
    SELECT at, model, input_tokens, cached_tokens, output_tokens, audio_seconds
    FROM llm_calls WHERE owner_id = %(person)s AND at >= %(since)s
    UNION ALL
    SELECT at, model, input_tokens, cached_tokens, output_tokens, audio_seconds
    FROM llm_calls WHERE sender_id = %(person)s AND at >= %(since)s
) AS calls
GROUP BY model
"""
ZONE_OF = "SELECT timezone FROM users WHERE telegram_user_id = %s"
# Note a warning about one budget of one period; a row back: not warned before.
WARN_ONCE = """
INSERT INTO budget_warnings (owner_id, budget, period_start) VALUES (%s, %s, %s)
ON CONFLICT DO NOTHING RETURNING owner_id
"""
OWNER_SUMS = f"SELECT model, {SUMS} FROM llm_calls WHERE owner_id = %s AND at >= %s GROUP BY model"
LAST_TURN = f"""
SELECT model, {SUMS} FROM llm_calls
WHERE turn_id = (SELECT turn_id FROM llm_calls WHERE owner_id = %s AND turn_id IS NOT NULL
                 ORDER BY at DESC LIMIT 1)
GROUP BY model
"""
# The owners who spent the most tokens since a time, each with their sums by model.
TOP_OWNERS = f"""
WITH top AS (
    SELECT owner_id, sum(input_tokens + output_tokens) AS tokens FROM llm_calls
    WHERE at >= %s AND owner_id IS NOT NULL GROUP BY owner_id ORDER BY tokens DESC LIMIT %s
)
SELECT c.owner_id, u.username, u.first_name, c.model, {SUMS}
FROM llm_calls c JOIN top USING (owner_id)
LEFT JOIN users u ON u.telegram_user_id = c.owner_id
WHERE c.at >= %s GROUP BY c.owner_id, u.username, u.first_name, c.model
"""
# Everything since a time, by owner, purpose and model (the operator's report).
BREAKDOWN = f"""
SELECT c.owner_id, u.username, u.first_name, c.purpose, c.model, {SUMS}
FROM llm_calls c LEFT JOIN users u ON u.telegram_user_id = c.owner_id
WHERE c.at >= %s GROUP BY c.owner_id, u.username, u.first_name, c.purpose, c.model
ORDER BY c.owner_id NULLS LAST, c.purpose, c.model
"""

# One turn's calls in the order they were made (the devtools web page's usage table).
TURN_CALLS = """
SELECT at, purpose, model, input_tokens, cached_tokens, output_tokens, estimated, latency_ms,
       status, error_class
FROM llm_calls WHERE turn_id = %s ORDER BY at, id
"""


@dataclass
class CallRecord:
    """One model call as stored: who it was for, what for, and what it took."""

    purpose: str
    """reply, summary, facts, compact, reminder, compress, describe, embedding or
    transcription."""
    model: str
    owner_id: int | None = None
    sender_id: int | None = None
    """Who wrote the message of a group turn (their budgets count the call too); None in
    private chats and for work that is the owner's alone."""
    conversation_id: str | None = None
    turn_id: str | None = None
    input_tokens: int = 0
    """Prompt tokens, cached ones included."""
    cached_tokens: int = 0
    output_tokens: int = 0
    audio_seconds: float | None = None
    """A transcription's length (its price is per minute)."""
    estimated: bool = False
    """The endpoint reported no usage: the tokens were counted here."""
    latency_ms: float | None = None
    status: str = "ok"
    error_class: str | None = None

    def params(self) -> dict[str, Any]:
        """Return the record as INSERT_CALL's parameters."""
        values = asdict(self)
        values["model"] = clean_text(self.model)[:200]
        for key in ("conversation_id", "turn_id"):
            values[key] = _uuid(values[key])
        return values


def _uuid(value: str | None) -> uuid.UUID | None:
    """Return `value` as a UUID, or None when it is none (a malformed id is dropped)."""
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None


class UsageRepository(Repository):
    """Store model calls and read their sums."""

    async def add(self, record: CallRecord, conn: Conn | None = None) -> None:
        """Store one call."""
        async with self._conn(conn) as c:
            await c.execute(INSERT_CALL, record.params())

    async def spent(
        self, person_id: int, day_start: datetime, month_start: datetime
    ) -> list[dict[str, Any]]:
        """Return the person's sums by model since `day_start` (`day_*`) and since
        `month_start` (`month_*`), their group turns' calls included."""
        since = min(day_start, month_start)
        params = {"day": day_start, "person": person_id, "since": since}
        async with self._conn() as c:
            return list(await (await c.execute(SPENT, params)).fetchall())

    async def zone_of(self, person_id: int) -> str | None:
        """Return the time zone the person (or group) chose (/tz), or None."""
        async with self._conn() as c:
            cur = await c.execute(ZONE_OF, (person_id,))
            row = await cur.fetchone()
            return row["timezone"] if row is not None else None

    async def warn_once(self, person_id: int, budget: str, period_start: datetime) -> bool:
        """Note that the person was warned about `budget` of the period starting at
        `period_start`; tell whether they were not before."""
        async with self._conn() as c:
            cur = await c.execute(WARN_ONCE, (person_id, budget, period_start))
            return await cur.fetchone() is not None

    async def owner_sums(self, owner_id: int, since: datetime) -> list[dict[str, Any]]:
        """Return the owner's sums since `since`, one row per model."""
        async with self._conn() as c:
            return list(await (await c.execute(OWNER_SUMS, (owner_id, since))).fetchall())

    async def last_turn(self, owner_id: int) -> list[dict[str, Any]]:
        """Return the sums of the owner's last turn (its reply and the work after it)."""
        async with self._conn() as c:
            return list(await (await c.execute(LAST_TURN, (owner_id,))).fetchall())

    async def top_owners(self, since: datetime, limit: int = 10) -> list[dict[str, Any]]:
        """Return the sums by model of the `limit` owners who spent most since `since`."""
        async with self._conn() as c:
            cur = await c.execute(TOP_OWNERS, (since, limit, since))
            return list(await cur.fetchall())

    async def breakdown(self, since: datetime) -> list[dict[str, Any]]:
        """Return everyone's sums since `since` by owner, purpose and model."""
        async with self._conn() as c:
            return list(await (await c.execute(BREAKDOWN, (since,))).fetchall())

    async def turn_calls(self, turn_id: str) -> list[dict[str, Any]]:
        """Return the calls of one turn (its reply, and the memory work after it), in order."""
        found = _uuid(turn_id)
        if found is None:
            return []
        async with self._conn() as c:
            return list(await (await c.execute(TURN_CALLS, (found,))).fetchall())
