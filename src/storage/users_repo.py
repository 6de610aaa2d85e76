"""Users: identity, seed 000's context window counter and reminders flag, and whether
the chat can be reached (a 403 from Telegram; not the same as /mute)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from src.storage.base import Conn, Repository, clean_text

# Runs at the start of every turn: committed without waiting for its WAL flush
# (synchronous_commit off for this statement only), as the user's message, stored right
# after as a normal commit, flushes it too. Names and last-seen time are all it writes.
UPSERT_USER = """
INSERT INTO users (telegram_user_id, username, first_name, language_code, last_seen_at)
SELECT %s, %s, %s, %s, now()
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
ON CONFLICT (telegram_user_id) DO UPDATE SET
    username = COALESCE(EXCLUDED.username, users.username),
    first_name = COALESCE(EXCLUDED.first_name, users.first_name),
    language_code = COALESCE(EXCLUDED.language_code, users.language_code),
    last_seen_at = now()
RETURNING *
"""
SELECT_USER = "SELECT * FROM users WHERE telegram_user_id = %s"
SET_ACTIVE_COUNT = "UPDATE users SET active_messages_count = %s WHERE telegram_user_id = %s"
ADVANCE_ACTIVE_COUNT = """
UPDATE users SET active_messages_count = active_messages_count + %s
WHERE telegram_user_id = %s AND active_messages_count IS NOT NULL
"""
FORGET = """
UPDATE users SET active_messages_count = 0, remind_of_yourself = '0'
WHERE telegram_user_id = %s
"""
SET_REMIND = "UPDATE users SET remind_of_yourself = %s WHERE telegram_user_id = %s"
SET_MODEL = "UPDATE users SET model = %s WHERE telegram_user_id = %s"
# The owner's row may not exist yet (/tz before the first message): created with it.
SET_TIMEZONE = """
INSERT INTO users (telegram_user_id, timezone) VALUES (%s, %s)
ON CONFLICT (telegram_user_id) DO UPDATE SET timezone = EXCLUDED.timezone
"""
MARK_REMINDED = "UPDATE users SET last_reminded_at = %s WHERE telegram_user_id = %s"
# Set once, when a chat first refuses a message; the chat's next update clears it
# (src/storage/delivery_repo.py, where updates are stored).
MARK_UNREACHABLE = """
UPDATE users SET unreachable_since = now()
WHERE telegram_user_id = %s AND unreachable_since IS NULL
"""
# Silent since `before`, reminders on, reachable, not reminded during this silence.
SELECT_DUE_REMINDERS = """
SELECT * FROM users
WHERE remind_of_yourself <> '0' AND last_seen_at IS NOT NULL AND last_seen_at < %s
  AND unreachable_since IS NULL
  AND (last_reminded_at IS NULL OR last_reminded_at < last_seen_at)
  AND (last_seen_at, telegram_user_id) > (%s, %s)
ORDER BY last_seen_at, telegram_user_id LIMIT %s
"""
# Before every row: where the first page starts.
FIRST_PAGE = (datetime.min.replace(tzinfo=UTC), -(2**63))


def upsert_params(
    telegram_user_id: int,
    username: str | None = None,
    first_name: str | None = None,
    language_code: str | None = None,
) -> tuple[int, str | None, str | None, str | None]:
    """Return UPSERT_USER's parameters: the names as Telegram gave them, cleaned."""
    return (
        telegram_user_id,
        clean_text(username) if username else None,
        clean_text(first_name) if first_name else None,
        clean_text(language_code) if language_code else None,
    )


class UsersRepository(Repository):
    """One row per Telegram user (or group chat)."""

    async def get_or_create(
        self,
        telegram_user_id: int,
        username: str | None = None,
        first_name: str | None = None,
        language_code: str | None = None,
        conn: Conn | None = None,
    ) -> dict[str, Any]:
        """Return the user, creating it, refreshing its names and last-seen time."""
        params = upsert_params(telegram_user_id, username, first_name, language_code)
        async with self._conn(conn) as c:
            row = await (await c.execute(UPSERT_USER, params)).fetchone()
            assert row is not None
            return row

    async def set_model(self, telegram_user_id: int, model: str | None) -> None:
        """Remember the model the user picked (None: LLM_MODEL)."""
        async with self._conn() as c:
            await c.execute(SET_MODEL, (model, telegram_user_id))

    async def set_timezone(self, telegram_user_id: int, zone: str | None) -> None:
        """Set the owner's own time zone (an IANA name checked by the caller; None:
        TIMEZONE again)."""
        async with self._conn() as c:
            await c.execute(SET_TIMEZONE, (telegram_user_id, zone))

    async def get(self, telegram_user_id: int, conn: Conn | None = None) -> dict[str, Any] | None:
        """Return the user, or None."""
        async with self._conn(conn) as c:
            return await (await c.execute(SELECT_USER, (telegram_user_id,))).fetchone()

    async def set_active_messages_count(
        self, telegram_user_id: int, value: int | None, conn: Conn | None = None
    ) -> None:
        """Set seed 000's counter: None = default window, 0 = empty, N = last N."""
        async with self._conn(conn) as c:
            await c.execute(SET_ACTIVE_COUNT, (value, telegram_user_id))

    async def advance_active_messages_count(
        self, telegram_user_id: int, by: int, conn: Conn | None = None
    ) -> None:
        """Grow the counter by the messages an exchange stored (no-op when NULL)."""
        async with self._conn(conn) as c:
            await c.execute(ADVANCE_ACTIVE_COUNT, (by, telegram_user_id))

    async def forget(self, telegram_user_id: int, conn: Conn | None = None) -> None:
        """Start a clean context and turn reminders off (seed 000's /forget)."""
        async with self._conn(conn) as c:
            await c.execute(FORGET, (telegram_user_id,))

    async def set_reminders(
        self, telegram_user_id: int, enabled: bool, conn: Conn | None = None
    ) -> None:
        """Turn reminders on or off."""
        async with self._conn(conn) as c:
            await c.execute(SET_REMIND, ("1" if enabled else "0", telegram_user_id))

    async def mark_unreachable(self, telegram_user_id: int, conn: Conn | None = None) -> bool:
        """Record that the chat refuses the bot's messages (it blocked the bot); return
        whether this is news (it was reachable until now). Reminders are left as they
        are: /mute is the user's choice alone."""
        async with self._conn(conn) as c:
            return (await c.execute(MARK_UNREACHABLE, (telegram_user_id,))).rowcount > 0

    async def mark_reminded(
        self, telegram_user_id: int, when: datetime, conn: Conn | None = None
    ) -> None:
        """Record that this silence has been answered with a reminder."""
        async with self._conn(conn) as c:
            await c.execute(MARK_REMINDED, (when, telegram_user_id))

    async def due_reminders(
        self,
        silent_since: datetime,
        limit: int = 100,
        after: dict[str, Any] | None = None,
        conn: Conn | None = None,
    ) -> list[dict[str, Any]]:
        """Return users with reminders on, silent since `silent_since`, not yet reminded,
        longest silent first; `after`: the page after that row."""
        start = (after["last_seen_at"], after["telegram_user_id"]) if after else FIRST_PAGE
        async with self._conn(conn) as c:
            cur = await c.execute(SELECT_DUE_REMINDERS, (silent_since, *start, limit))
            return list(await cur.fetchall())
