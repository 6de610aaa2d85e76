"""Everything a turn reads before the model call, in two pipelined round trips.

At the turn's start, with the owner's turn lease (`TurnLocks.hold`): the owner's row,
created or refreshed (names, last seen), their current conversation, the id of its
thread's last checkpoint and, for a Telegram update run again, the message it stored
before (`send_turn_start`). Before the model call: the owner's row (seed 000's counter),
the conversation (running summary, messages awaiting fact extraction), the last stored
messages, the oldest unsummarized ones, the facts and the compacts of previous sessions
(`read_turn`, from one snapshot). Each round's
reads are independent: they are sent together in pipeline mode and their results read
back after one sync, over one pool checkout. The statements are the repositories' own
(the checkpoint's, the saver's).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from psycopg.pq import TransactionStatus

from src.storage.chat_moves import MOVED_TO
from src.storage.checkpoint_rows import SELECT_OWNERS_LATEST_ID
from src.storage.conversation_repo import (
    LOAD_LAST_MESSAGES,
    SELECT_CONVERSATION_WITH_PENDING,
    SELECT_LATEST_CONVERSATION,
    SELECT_UNSUMMARIZED,
)
from src.storage.delivery_repo import MESSAGE_ID
from src.storage.memory_repo import GROUP, SELECT_FACTS, SELECT_TOPIC_COMPACTS
from src.storage.users_repo import SELECT_USER, UPSERT_USER, upsert_params

Row = dict[str, Any]

# A turn's reads see one snapshot (see `read_turn`).
BEGIN_ONE_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
COMMIT = "COMMIT"


@dataclass(frozen=True)
class TurnReads:
    """What one turn read: rows as the repositories return them."""

    user: Row | None
    conversation: Row | None
    messages: list[Row]
    """The last live messages, oldest first."""
    facts: list[Row]
    """Most important first."""
    compacts: list[Row]
    """Newest first."""
    unsummarized: list[Row] = field(default_factory=list)
    """The oldest live messages not yet summarized, oldest first (at most `lag`)."""


@dataclass(frozen=True)
class TurnStart:
    """What a turn read at its start."""

    user: Row
    """The owner's row, created or refreshed."""
    conversation: Row | None
    """The owner's current conversation (id, last message time, end of its last ended
    session), or None before their first."""
    stored_message_id: int | None = None
    """The user's message an earlier run of the turn's Telegram update stored (its
    worker died), if any."""
    latest_checkpoint_id: str | None = None
    """The id of the last checkpoint of the conversation's thread, when asked for."""
    moved_to: int | None = None
    """The chat id a group owner's memory moved to (src/storage/chat_moves.py): the turn
    is then the supergroup's."""


async def send_turn_start(
    conn: Any,
    owner_id: int,
    username: str | None = None,
    first_name: str | None = None,
    language_code: str | None = None,
    update_id: int | None = None,
    checkpoints: bool = False,
    topic: int = 0,
) -> Callable[[], Awaitable[TurnStart]]:
    """Send the turn's first statements over `conn` (in the caller's pipeline: the
    lease's) and return what reads their results once it is synced. With the turn's
    Telegram `update_id`, also look up the message an earlier run of it stored; with
    `checkpoints` (the graph's checkpoints are in this database), the id of the
    conversation thread's last checkpoint. The conversation is the owner's current one
    in `topic` (0: General, or a chat without topics). For a group, also whether it
    moved to a supergroup."""
    moved = await conn.execute(MOVED_TO, (owner_id,)) if owner_id < 0 else None
    user = await conn.execute(
        UPSERT_USER, upsert_params(owner_id, username, first_name, language_code)
    )
    conversation = await conn.execute(SELECT_LATEST_CONVERSATION, (owner_id, topic))
    stored = None if update_id is None else await conn.execute(MESSAGE_ID, (update_id,))
    latest = await conn.execute(SELECT_OWNERS_LATEST_ID, (owner_id, topic)) if checkpoints else None

    async def read() -> TurnStart:
        row = await user.fetchone()
        assert row is not None
        link = await stored.fetchone() if stored is not None else None
        last = await latest.fetchone() if latest is not None else None
        move = await moved.fetchone() if moved is not None else None
        return TurnStart(
            row,
            await conversation.fetchone(),
            link["message_id"] if link else None,
            last["checkpoint_id"] if last else None,
            move["new_id"] if move else None,
        )

    return read


async def read_turn(
    conn: Any,
    owner_id: int,
    conversation_id: uuid.UUID,
    *,
    messages: int,
    facts_every: int,
    facts: int,
    compacts: int,
    lag: int = 0,
    member: int = GROUP,
) -> TurnReads:
    """Read a turn's inputs over `conn` in one round trip (see the module's doc). The
    facts are the owner's own and, in a group, the writing `member`'s: never another
    member's."""
    # One snapshot: the running summary and the marks of the messages it folded are
    # committed together, and must be read together. Each statement of an autocommit
    # pipeline sees what committed before it started, so a fold committing between the
    # conversation's read and the messages' left a message marked folded beside the
    # summary from before the fold: in neither the request nor its summary. BEGIN and
    # COMMIT go in the pipeline: psycopg's transaction() would sync after each. Inside a
    # transaction of the caller's (a replay's sandbox), its snapshot and its end are the
    # caller's: a BEGIN there is refused, a rollback would undo the caller's work.
    own = conn.info.transaction_status == TransactionStatus.IDLE
    try:
        async with conn.pipeline():
            if own:
                await conn.execute(BEGIN_ONE_SNAPSHOT)
            cursors = [
                await conn.execute(SELECT_USER, (owner_id,)),
                await conn.execute(
                    SELECT_CONVERSATION_WITH_PENDING, (facts_every, conversation_id)
                ),
                await conn.execute(LOAD_LAST_MESSAGES, (conversation_id, max(messages, 0))),
                await conn.execute(SELECT_FACTS, (owner_id, [GROUP, member], max(facts, 0))),
                await conn.execute(
                    SELECT_TOPIC_COMPACTS, (owner_id, conversation_id, max(compacts, 0))
                ),
                await conn.execute(SELECT_UNSUMMARIZED, (conversation_id, max(lag, 0))),
            ]
            if own:
                await conn.execute(COMMIT)
    except BaseException:
        # A failed read leaves its transaction open (the pool would roll it back too).
        if own:
            with contextlib.suppress(Exception):
                await conn.rollback()
        raise
    # Read once the pipeline is synced: a read inside it would cost a round trip more.
    user = await cursors[0].fetchone()
    conversation = await cursors[1].fetchone()
    rows = [list(await cur.fetchall()) for cur in cursors[2:]]
    return TurnReads(user, conversation, *rows)
