"""The owner's memory epoch (migration 0018): what memory work checks before it writes.

Every delete of memory moves the owner to a new epoch (`bump_epoch`, in the delete's
transaction). Memory work reads the epoch when it starts (a `MemoryEpoch`) and, in the
transaction that stores its result, checks first that it still holds (`holds`): the
check takes a share lock on the owner's row, so a delete either waits for that write and
then deletes what it stored, or came first and the write finds another epoch and stores
nothing. Transactions that lock the owner's conversation row take it before the owner's
row (as storing a message does): then they never wait on each other in a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SELECT_EPOCH = "SELECT memory_epoch FROM users WHERE telegram_user_id = %s"
SELECT_EPOCH_FOR_SHARE = SELECT_EPOCH + " FOR SHARE"
BUMP_EPOCH = """
UPDATE users SET memory_epoch = nextval('memory_epochs') WHERE telegram_user_id = %s
RETURNING memory_epoch
"""


@dataclass(frozen=True)
class MemoryEpoch:
    """The owner's memory epoch when a piece of memory work started (None: no row)."""

    owner: int
    value: int | None

    async def holds(self, conn: Any) -> bool:
        """Tell whether the owner is still at this epoch, and keep it so until `conn`'s
        transaction ends (a share lock on the owner's row; call it inside one)."""
        row = await (await conn.execute(SELECT_EPOCH_FOR_SHARE, (self.owner,))).fetchone()
        return (row["memory_epoch"] if row is not None else None) == self.value


async def read_epoch(conn: Any, owner: int) -> MemoryEpoch:
    """Return the owner's memory epoch now."""
    row = await (await conn.execute(SELECT_EPOCH, (owner,))).fetchone()
    return MemoryEpoch(owner, row["memory_epoch"] if row is not None else None)


async def bump_epoch(conn: Any, owner: int) -> MemoryEpoch:
    """Move the owner to a new memory epoch (in the caller's transaction) and return it:
    memory work that started before it stores nothing from now on."""
    row = await (await conn.execute(BUMP_EPOCH, (owner,))).fetchone()
    return MemoryEpoch(owner, row["memory_epoch"] if row is not None else None)


async def still_holds(conn: Any, epoch: MemoryEpoch | None) -> bool:
    """Tell whether work started at `epoch` may write (None: work that no delete can race,
    as it runs under the owner's turn lock, is not checked)."""
    return epoch is None or await epoch.holds(conn)
