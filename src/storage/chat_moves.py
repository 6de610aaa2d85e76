"""Move a group's rows to its new chat id when Telegram upgrades it to a supergroup.

An upgraded group (enabling topics does it) gets a new chat id, and the group is the
memory owner of everything said in it: its conversations, summaries, compacts, facts,
budget and model choice, in every table with an owner column (found in the catalog, as
erasure_repo.py finds them: a table added later moves too), and the chat's inbox and
outbox rows. Checkpoint threads are the conversations' ids: they follow the
conversations; their runs' metadata names the new owner.

One transaction, recorded in `chat_moves`: moving again (Telegram tells the upgrade in
both chats, and a reply refused for the old id tells it again) finds nothing left under
the old id. It first locks the group's conversations and then its `users` row (the order
of src/storage/epochs.py), and a row inserted for the old id afterwards, by whatever
writes in the background, follows the move (sql/0034_chat_moves.sql): its insert waits for
a move under way on that same row, and then reads the move. An insert that came first is
waited for by the move, which then finds its row. So nothing written for the group stays
under the old id, whenever it is written.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from src.storage.base import Repository
from src.storage.erasure_repo import OWNER_COLUMNS, OWNER_TABLES

# Not moved: a turn lease belongs to the process holding it, and ends with it.
NOT_MOVED = frozenset({"turn_leases"})
# The new chat's own row (made by a message there before the move) gives way to the
# group's, which carries its model choice, budget and memory epoch.
DROP_NEW_OWNER = """
DELETE FROM users WHERE telegram_user_id = %(new)s
  AND EXISTS (SELECT 1 FROM users WHERE telegram_user_id = %(old)s)
"""
# The search index prefixes every word with the owner's id (0007_search_owner.sql).
MOVE_MESSAGES = """
UPDATE messages SET owner_id = %(new)s,
    search_vector = CASE WHEN search_vector IS NOT NULL
                         THEN owner_search_vector(%(new)s, content) END
WHERE owner_id = %(old)s
"""
# Before anything moves: the rows every writer of the group's memory takes (see the doc).
LOCK_CONVERSATIONS = """
SELECT id FROM conversations WHERE telegram_user_id = %(old)s ORDER BY id FOR UPDATE
"""
LOCK_OWNER = "SELECT 1 FROM users WHERE telegram_user_id = %(old)s FOR UPDATE"
# Idempotent; a move of the group's earlier id now leads to its newest one.
RECORD_MOVE = """
INSERT INTO chat_moves (old_id, new_id) VALUES (%(old)s, %(new)s)
ON CONFLICT (old_id) DO UPDATE SET new_id = EXCLUDED.new_id
"""
FOLLOW_MOVES = "UPDATE chat_moves SET new_id = %(new)s WHERE new_id = %(old)s"
MOVED_TO = "SELECT new_id FROM chat_moves WHERE old_id = %s"
MOVE_OWNER = "UPDATE {table} SET {column} = %(new)s WHERE {column} = %(old)s"
# A reply still to send goes to the new chat; the message it quoted stays in the old one.
MOVE_INBOX = "UPDATE inbox SET chat_id = %(new)s WHERE chat_id = %(old)s"
MOVE_OUTBOX = """
UPDATE outbox SET chat_id = %(new)s, reply_to = NULL, thread_id = NULL
WHERE chat_id = %(old)s
"""
HAS_CHECKPOINTS = "SELECT to_regclass('checkpoints') IS NOT NULL AS present"
# The runs' metadata names their owner (erasure finds stray threads by it).
MOVE_CHECKPOINTS = """
UPDATE checkpoints SET metadata = jsonb_set(metadata, '{owner_id}', to_jsonb(%(new)s::bigint))
WHERE thread_id = ANY(%(threads)s) AND metadata ->> 'owner_id' = %(old)s::text
"""


class ChatMoveRepository(Repository):
    """Give a group's rows its new (supergroup) chat id."""

    async def move(self, old: int, new: int) -> dict[str, int]:
        """Move every row of the owner `old` to `new`; return the rows moved per table."""
        moved: dict[str, int] = {}
        ids = {"old": old, "new": new}
        async with self._conn() as conn, conn.transaction():
            # Locked first, the order every writer takes them in (see the module's doc).
            locked = await (await conn.execute(LOCK_CONVERSATIONS, ids)).fetchall()
            await conn.execute(LOCK_OWNER, ids)
            await conn.execute(RECORD_MOVE, ids)
            await conn.execute(FOLLOW_MOVES, ids)
            await conn.execute(DROP_NEW_OWNER, ids)
            tables = await (await conn.execute(OWNER_TABLES, (list(OWNER_COLUMNS),))).fetchall()
            for row in tables:
                table, column = row["table_name"], row["column_name"]
                if table in NOT_MOVED:
                    continue
                if (table, column) == ("messages", "owner_id"):
                    query: sql.SQL | sql.Composed = sql.SQL(MOVE_MESSAGES)
                else:
                    query = sql.SQL(MOVE_OWNER).format(
                        table=sql.Identifier(table), column=sql.Identifier(column)
                    )
                cur = await conn.execute(query, ids)
                moved[table] = moved.get(table, 0) + cur.rowcount
            moved["inbox"] = (await conn.execute(MOVE_INBOX, ids)).rowcount
            moved["outbox"] = (await conn.execute(MOVE_OUTBOX, ids)).rowcount
            threads = [str(row["id"]) for row in locked]
            moved["checkpoints"] = await _move_checkpoints(conn, old, new, threads)
        return {table: n for table, n in moved.items() if n}

    async def moved_to(self, old: int) -> int | None:
        """Return the chat id the group `old` moved to, or None."""
        async with self._conn() as conn:
            row = await (await conn.execute(MOVED_TO, (old,))).fetchone()
        return row["new_id"] if row is not None else None


async def _move_checkpoints(conn: Any, old: int, new: int, threads: list[str]) -> int:
    """Name the new owner in the metadata of the group's threads' checkpoints."""
    if not threads:
        return 0
    present = await (await conn.execute(HAS_CHECKPOINTS)).fetchone()
    if present is None or not present["present"]:
        return 0
    params = {"old": old, "new": new, "threads": threads}
    return int((await conn.execute(MOVE_CHECKPOINTS, params)).rowcount)
