"""Move a group's rows to its new chat id when Telegram upgrades it to a supergroup.

An upgraded group (enabling topics does it) gets a new chat id, and the group is the
memory owner of everything said in it: its conversations, summaries, compacts, facts,
budget and model choice, in every table with an owner column (found in the catalog, as
erasure_repo.py finds them: a table added later moves too), and the chat's inbox and
outbox rows. One transaction; moving again finds nothing left under the old id.
Checkpoint threads are the conversations' ids: they follow the conversations.
"""

from __future__ import annotations

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
MOVE_OWNER = "UPDATE {table} SET {column} = %(new)s WHERE {column} = %(old)s"
# A reply still to send goes to the new chat; the message it quoted stays in the old one.
MOVE_INBOX = "UPDATE inbox SET chat_id = %(new)s WHERE chat_id = %(old)s"
MOVE_OUTBOX = """
UPDATE outbox SET chat_id = %(new)s, reply_to = NULL, thread_id = NULL
WHERE chat_id = %(old)s
"""


class ChatMoveRepository(Repository):
    """Give a group's rows its new (supergroup) chat id."""

    async def move(self, old: int, new: int) -> dict[str, int]:
        """Move every row of the owner `old` to `new`; return the rows moved per table."""
        moved: dict[str, int] = {}
        ids = {"old": old, "new": new}
        async with self._conn() as conn, conn.transaction():
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
        return {table: n for table, n in moved.items() if n}
