"""Move a group's memory to its supergroup's chat id, whenever the upgrade arrives.

Telegram tells the upgrade in the old group (`migrate_to_chat_id`), in the new
supergroup (`migrate_from_chat_id`), and in the refusal of a reply to the old id
(`ChatMigrated`); any of them may come while the group's turn is running, and each of
them moves. What makes that safe:

1. The move holds the supergroup's turn lock, then the group's (in id order, as an erase
   takes groups' locks): the group's running turn ends first, with everything it writes
   under its lock (its messages, reply, checkpoints), and no turn of the supergroup starts
   meanwhile. The upgrade's updates are jobs of the supergroup's chat (src/bot/receive.py),
   so its messages that come after the upgrade are answered after the move.
2. Memory work of the group's turn that gave way to the move (the summary and facts after
   a reply, shielded) is waited for in this process, and the group's checkpoints still in
   memory are written, before the rows move.
3. Whatever is written for the old id later (usage rows and embeddings written in the
   background, work of another process) follows the move in the database: the move is
   recorded and locks the group's row, and every insert for a moved group takes its new
   id (sql/0034_chat_moves.sql). Memory work guarded by the group's memory epoch finds
   the group's row gone and stores nothing; it marked nothing either, so it is done
   again for the supergroup.
4. A turn that starts for the old id after the move (an update of the old chat queued
   behind the running turn) reads the move with its lease and runs as the supergroup's
   (AgentService).

Moving again finds nothing left under the old id: duplicate updates are harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from src.services.agent_service import AgentService
from src.services.erasure import RUN_KINDS
from src.storage.chat_moves import ChatMoveRepository
from src.storage.checkpointer import PooledPostgresSaver

logger = logging.getLogger(__name__)


async def move_group(service: AgentService, old: int, new: int) -> dict[str, int]:
    """Give the group `old`'s rows its supergroup id `new`; return the rows moved per
    table (see the module's doc)."""
    deps = service.deps
    async with contextlib.AsyncExitStack() as held:
        for owner in sorted({old, new}):
            await held.enter_async_context(service.locks.hold(owner))
        conversations = await deps.conversations.conversation_ids(old)
        work = [deps.runs.running((kind, c)) for c in conversations for kind in RUN_KINDS]
        running = [task for task in work if task is not None]
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        saver = service.graph.checkpointer
        if isinstance(saver, PooledPostgresSaver):
            for conversation_id in conversations:
                await saver.settle(str(conversation_id))
        return await ChatMoveRepository(deps.conversations.pool).move(old, new)
