"""Keep what survived a fact extraction that failed, and mark only what it came from.

A cut answer is JSON that stops mid-way: `{"facts": [{...}, {...}, {"key": "ci`. Its
complete items are as good as those of a whole answer; the item being written when the
cap came, and anything after it, is lost (the caller asks again for less). Facts and the
marks of the messages they came from are stored in one transaction; a fact the extractor
says to delete is deleted there as every delete of memory is (`store_facts`).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import TYPE_CHECKING, Any

from src.graph.deps import GraphDeps
from src.graph.memory.epoch import moved, started
from src.graph.memory.errors import log_failure
from src.graph.memory.fact_members import by_member
from src.storage.base import Conn
from src.storage.epochs import still_holds
from src.storage.erasure_repo import Deleted, ErasureRepository, FactKey

if TYPE_CHECKING:
    from src.graph.memory.facts import Batch

logger = logging.getLogger(__name__)

_FACTS_ARRAY = re.compile(r'"facts"\s*:\s*\[')
_BETWEEN_ITEMS = " \t\r\n,"


def complete_items(text: str) -> list[Any]:
    """Return each complete `{...}` object of the `"facts": [` array in a cut answer.

    Without a `"facts"` key, the first array in the text is read (a model that answers a
    bare list). Reading stops at the first item that is not a whole JSON object.
    """
    match = _FACTS_ARRAY.search(text)
    if match is not None:
        pos = match.end()
    elif "[" in text:
        pos = text.index("[") + 1
    else:
        return []
    decoder = json.JSONDecoder()
    items: list[Any] = []
    while True:
        while pos < len(text) and text[pos] in _BETWEEN_ITEMS:
            pos += 1
        if not text.startswith("{", pos):
            return items
        try:
            item, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return items
        items.append(item)


async def store_and_mark(
    deps: GraphDeps, batch: Batch, facts: list[dict[str, Any]], marked: list[int]
) -> int:
    """Store facts and mark the messages `marked` in one transaction; return facts stored.

    Nothing is stored or marked when the owner's memory was deleted from since the work
    started (its epoch, see epoch.py), or when a message it read does not wait for
    extraction any more (/forget, a delete, another extraction took it): both checked,
    and held, in the transaction that writes.
    """
    if not facts and not marked:
        return 0
    async with deps.conversations.pool.connection() as conn, conn.transaction():
        if not await still_holds(conn, started(batch.owner_id)):
            logger.info(
                "facts of %s from messages %s dropped: memory was deleted meanwhile",
                batch.owner_id,
                batch.ids,
            )
            return 0
        pending = await deps.conversations.lock_facts_pending(
            batch.conversation_id, batch.ids, conn
        )
        if len(pending) != len(set(batch.ids)):
            logger.info(
                "facts of %s from messages %s dropped: not all of them wait any more",
                batch.owner_id,
                batch.ids,
            )
            return 0
        deleted: list[Deleted] = []
        if facts:
            deleted = await store_facts(deps, batch.owner_id, facts, batch.conversation_id, conn)
        if marked:
            await deps.conversations.mark_facts_extracted(batch.conversation_id, marked, conn=conn)
    for gone in deleted:  # its own deletes: this work goes on from the owner's new epoch
        if gone.epoch is not None:
            moved(gone.epoch, gone.needles)
    if facts:
        logger.info(
            "stored %d facts of %s from %d messages", len(facts), batch.owner_id, len(batch.ids)
        )
    return len(facts)


async def store_facts(
    deps: GraphDeps,
    owner: int,
    facts: list[dict[str, Any]],
    source: uuid.UUID | None,
    conn: Conn,
) -> list[Deleted]:
    """Store extracted facts in the caller's transaction, each as its owner's (`member`:
    in a group a member's, else the owner's own): each `delete` of a current key takes
    the door every delete of memory takes (erasure_repo.py: a new memory epoch, the fact
    redacted from the checkpoints), the rest are upserted. Return what was deleted."""
    deleted: list[Deleted] = []
    for member, theirs in by_member(facts).items():
        current = set(await deps.memory.fact_keys(owner, None, conn=conn, member=member))
        for fact in theirs:
            if fact.get("action") == "delete" and fact["key"] in current:
                what = FactKey(fact["key"], member)
                deleted.append(
                    await ErasureRepository(deps.conversations.pool).delete(owner, what, conn)
                )
        kept = [f for f in theirs if f.get("action") != "delete"]
        if kept:
            keep = deps.settings.max_facts
            await deps.memory.upsert_facts(owner, kept, source, keep, conn, member)
    return deleted


async def settle(
    deps: GraphDeps, batch: Batch, salvaged: list[dict[str, Any]], refusal: BaseException | None
) -> int:
    """Mark a batch that cannot be split (one message) after a cut answer or a `refusal`.

    Asking again would be cut or refused again: it keeps the facts salvaged from the cut
    answer (none after a refusal), and says so in one line naming the message ids,
    never their text.
    """
    what = f"fact extraction of messages {batch.ids} of {batch.owner_id}"
    if refusal is not None:
        log_failure(logger, what, refusal, "the model refuses them: marked without facts")
    else:
        logger.warning(
            "%s: the answer was cut at its output cap even for them alone;"
            " kept its %d complete facts",
            what,
            len(salvaged),
        )
    return await store_and_mark(deps, batch, salvaged, batch.ids)
