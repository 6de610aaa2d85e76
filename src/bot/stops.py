"""/stop across processes: the turn to stop may run in any process that works the queue.

The process that receives /stop (or a press of the Stop button) stops the chat's turn
itself when it runs there. Otherwise, if the queue says one of the chat's updates is
being handled, it asks every process over PostgreSQL's LISTEN/NOTIFY, and the one running
the turn stops it and answers the same way. No answer within ACK_WAIT means nothing of
the chat's could be stopped (it was a command, or it had just finished).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from typing import Any

import psycopg

from src.bot.live import LiveTurns

logger = logging.getLogger(__name__)

CHANNEL = "tgagent_stop"
ACK_CHANNEL = "tgagent_stopped"
ACK_WAIT = 1.5  # seconds the asking process waits for the running one to answer
RECONNECT_AFTER = 1.0

# Whether one of the chat's updates (or, given, that update) is being handled.
RUNNING = """
SELECT EXISTS (
    SELECT 1 FROM procrastinate_jobs
    WHERE lock = %s AND status = 'doing'
      AND (%s::bigint IS NULL OR (args ->> 'update_id')::bigint = %s)
) AS running
"""


class StopChannel:
    """Stop a chat's live turn wherever it runs."""

    def __init__(self, dsn: str, pool: Any, local: LiveTurns) -> None:
        self.dsn = dsn
        self.pool = pool
        self.local = local
        self.listening = asyncio.Event()
        self._waiting: dict[str, asyncio.Future[str]] = {}

    async def request(
        self,
        chat_id: int,
        user_id: int,
        admin: bool,
        turn: int | None = None,
        topic: int | None = None,
    ) -> str:
        """Stop the chat's running turn (`turn`: only if it is that update's; `topic`:
        only if it answers in that topic); return "stopped", "not_yours" or "none"."""
        here = self.local.stop(chat_id, user_id, admin, turn, topic)
        if here is not None:
            return here
        async with self.pool.connection() as conn:
            running = (f"chat:{chat_id}", turn, turn)
            row = await (await conn.execute(RUNNING, running)).fetchone()
            if row is None or not row["running"]:
                return "none"
            token = secrets.token_hex(8)
            answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            self._waiting[token] = answer
            request = {"chat": chat_id, "user": user_id, "admin": admin, "token": token}
            request["turn"], request["topic"] = turn, topic
            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps(request)))
        try:
            return await asyncio.wait_for(answer, ACK_WAIT)
        except TimeoutError:
            return "none"
        finally:
            self._waiting.pop(token, None)

    async def run(self) -> None:
        """Listen for requests and answers until cancelled, reconnecting after failures."""
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    await conn.execute(f"LISTEN {ACK_CHANNEL}")
                    self.listening.set()
                    async for note in conn.notifies():
                        await self._on_note(note.channel, note.payload)
            except (psycopg.Error, OSError) as exc:
                logger.warning("stop channel lost (%s): listening again", exc)
            finally:
                self.listening.clear()
            await asyncio.sleep(RECONNECT_AFTER)

    async def _on_note(self, channel: str, payload: str) -> None:
        try:
            data = json.loads(payload)
        except ValueError:
            return
        if channel == ACK_CHANNEL:
            answer = self._waiting.get(data.get("token"))
            if answer is not None and not answer.done():
                answer.set_result(str(data.get("result")))
            return
        turn, topic = data.get("turn"), data.get("topic")
        result = self.local.stop(
            int(data["chat"]),
            int(data["user"]),
            bool(data["admin"]),
            int(turn) if turn is not None else None,
            int(topic) if topic is not None else None,
        )
        if result is None:
            return
        ack = json.dumps({"token": data["token"], "result": result})
        try:
            async with self.pool.connection() as conn:
                await conn.execute("SELECT pg_notify(%s, %s)", (ACK_CHANNEL, ack))
        except psycopg.Error as exc:
            logger.warning("could not confirm a stop of chat %s: %s", data["chat"], exc)
