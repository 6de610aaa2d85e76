"""A search that names a time and nothing else: the messages of that time.

"What happened yesterday?", "what did I say last Tuesday?", "что было вчера?": once the
date's words and the words that only ask what was said (`search_dates.FILLER`) are
taken out, nothing is left to search for, and refusing the question as stop words only
(as a search without a date is) answers nothing. The time itself is what is asked:
its messages are listed, newest first, within the owner's and the scope's
conversations, from the owner's time index (sql/0032_search_days.sql).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# Newest first within the range; `-infinity` / `infinity` for an open end, so the
# bounds stay plain comparisons the index answers. A message without text (an assistant's
# turn that only called tools) says nothing: it is not listed, nor counted in the limit.
IN_RANGE = """
SELECT m.id, m.conversation_id, m.number, m.role, m.content, m.created_at,
       m.squashed_at IS NOT NULL AS squashed
FROM messages m
WHERE m.owner_id = %(user)s AND m.search_vector IS NOT NULL
  AND m.created_at >= coalesce(%(since)s::timestamptz, '-infinity')
  AND m.created_at < coalesce(%(until)s::timestamptz, 'infinity')
  AND m.role = ANY(%(roles)s) AND m.id <> %(exclude)s AND m.content ~ '[^[:space:]]'
  AND (%(scope)s::uuid[] IS NULL OR m.conversation_id = ANY(%(scope)s::uuid[]))
ORDER BY m.created_at DESC, m.id DESC LIMIT %(limit)s
"""


@dataclass(frozen=True)
class Span:
    """The time a search listed: `since` inclusive, `until` exclusive (None: open)."""

    since: datetime | None
    until: datetime | None


@dataclass(frozen=True)
class Found:
    """What a search found: hits best first, or with `span` the messages of the time
    the query named (and nothing else), newest first."""

    rows: list[dict[str, Any]]
    span: Span | None = None


async def messages_in_range(
    pool: Any,
    owner: int,
    span: Span,
    limit: int,
    roles: list[str],
    exclude_id: int | None,
    scope: list[uuid.UUID] | None,
) -> list[dict[str, Any]]:
    """Return the owner's user and assistant messages with text in `span`, newest first."""
    params = {
        "user": owner,
        "since": span.since,
        "until": span.until,
        "roles": roles,
        "exclude": exclude_id or 0,
        "scope": scope,
        "limit": limit,
    }
    async with pool.connection() as c:
        cur = await c.execute(IN_RANGE, params)
        return list(await cur.fetchall())
