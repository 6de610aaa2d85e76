"""Everything stored about one owner, read for /export (every query names the owner)."""

from __future__ import annotations

from typing import Any

from src.storage.base import Repository

SELECT_USER = """
SELECT username, first_name, language_code, timezone, model, remind_of_yourself,
       active_messages_count,
       created_at, last_seen_at
FROM users WHERE telegram_user_id = %s
"""
SELECT_CONVERSATIONS = """
SELECT id, created_at, ended_at, summary FROM conversations WHERE telegram_user_id = %s
ORDER BY created_at, id
"""
# Every stored message, squashed originals included, in thread order.
SELECT_MESSAGES = """
SELECT m.conversation_id, m.id, m.number, m.role, m.content, m.created_at, m.meta,
       m.squashed_at IS NOT NULL AS squashed
FROM messages m JOIN conversations c ON c.id = m.conversation_id
WHERE c.telegram_user_id = %s
ORDER BY m.conversation_id, m.created_at, m.id
"""
SELECT_SQUASHES = """
SELECT s.conversation_id, s.replaced_numbers, s.summary, s.requested_by, s.created_at
FROM squash_log s JOIN conversations c ON c.id = s.conversation_id
WHERE c.telegram_user_id = %s
ORDER BY s.created_at, s.id
"""
# Every value of every fact: the current ones and their history, oldest first per key.
SELECT_FACTS = """
SELECT * FROM facts WHERE telegram_user_id = %s ORDER BY member_id, key, created_at, id
"""
# A person's own facts kept in groups (as a member's, issue 33): theirs to see and erase.
SELECT_FACTS_AS_MEMBER = """
SELECT * FROM facts WHERE member_id = %s AND telegram_user_id <> %s
ORDER BY telegram_user_id, key, created_at, id
"""
SELECT_COMPACTS = """
SELECT created_at, summary, topics, last_action FROM session_compacts
WHERE telegram_user_id = %s ORDER BY created_at, id
"""
SELECT_PENDING = """
SELECT text, created_at FROM pending_facts WHERE telegram_user_id = %s ORDER BY created_at, id
"""
# Scheduled tasks (issue 35), each with its runs' times and outcomes.
SELECT_TASKS = """
SELECT t.id, t.instruction, t.repeat, t.timezone, t.status, t.next_at, t.created_at,
       coalesce((SELECT json_agg(json_build_object('slot', r.slot, 'outcome', r.outcome,
                                                   'late', r.late) ORDER BY r.slot)
                 FROM task_runs r WHERE r.task_id = t.id), '[]') AS runs
FROM scheduled_tasks t WHERE t.owner_id = %s ORDER BY t.created_at, t.id
"""
SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"
# Usage totals by month (UTC) and model.
SELECT_USAGE = """
SELECT to_char(date_trunc('month', at AT TIME ZONE 'UTC'), 'YYYY-MM') AS month, model,
       sum(calls)::bigint AS calls, sum(input_tokens)::bigint AS input_tokens,
       sum(output_tokens)::bigint AS output_tokens
FROM llm_calls WHERE owner_id = %s GROUP BY 1, 2 ORDER BY 1, 2
"""


class ExportRepository(Repository):
    """Read what is stored about one owner."""

    async def read(self, owner: int) -> dict[str, Any]:
        """Return the owner's rows, by kind, in one snapshot (a repeatable-read
        transaction): user, conversations, messages, squashes, facts, compacts, pending,
        usage, tasks, and a person's facts kept in groups (`facts_as_member`)."""
        queries = {
            "conversations": SELECT_CONVERSATIONS,
            "messages": SELECT_MESSAGES,
            "squashes": SELECT_SQUASHES,
            "facts": SELECT_FACTS,
            "compacts": SELECT_COMPACTS,
            "pending": SELECT_PENDING,
            "usage": SELECT_USAGE,
            "tasks": SELECT_TASKS,
        }
        async with self._conn() as c, c.transaction():
            await c.execute(SNAPSHOT)
            user = await (await c.execute(SELECT_USER, (owner,))).fetchone()
            found: dict[str, Any] = {"user": user}
            for name, query in queries.items():
                found[name] = list(await (await c.execute(query, (owner,))).fetchall())
            found["facts_as_member"] = []
            if owner > 0:  # a person (groups have negative ids)
                cur = await c.execute(SELECT_FACTS_AS_MEMBER, (owner, owner))
                found["facts_as_member"] = list(await cur.fetchall())
        return found
