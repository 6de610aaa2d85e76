"""Delete an owner's memory (a fact, a compact, all of it, /forget's context), or all of an owner.

Each runs in one transaction that first moves the owner to a new memory epoch
(src/storage/epochs.py), so memory work that started before it stores nothing after it,
and takes what it deleted out of the owner's checkpoints (checkpoint_redaction.py). The
callers hold the owner's turn lock (src/services/erasure.py).

`erase` deletes every row of the owner in every table of the schema that has an owner
column (`telegram_user_id` or `owner_id`, found in the catalog: a table added later is
erased too), the owner's checkpoint threads, and the chat's outbox rows (replies). Some
rows stay, without what was said: `llm_calls` keeps the owner's usage as daily totals
(one row per day, purpose and model: no conversation, turn or single call), with the owner
id only for the current budget period so that erasing never resets a budget; the chat's
update ids stay, bare, in `inbox_erased` until they are pruned, so that an update Telegram
sends again is still refused; `turn_leases` keeps the lease the erase itself holds
(released right after it). A person's `erase` is also their member's clear (`MemberFacts`)
in every group of MEMBER_GROUPS, in the same transaction: each group's epoch moves, their
facts go from its rows and checkpoints, their lines from its kept texts, and their
messages there not extracted yet make no facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import sql

from src.storage.base import Conn, Repository
from src.storage.checkpoint_redaction import (
    Needles,
    compact_needles,
    fact_needles,
    owner_threads,
    redact_owner,
)
from src.storage.conversation_repo import ConversationRepository
from src.storage.epochs import MemoryEpoch, bump_epoch
from src.storage.users_repo import UsersRepository

# Conversations first, then the owner's row (see epochs.py): the order a stored message
# and a summary fold lock them in.
LOCK_CONVERSATIONS = "SELECT id FROM conversations WHERE telegram_user_id = %s FOR UPDATE"
# /memory clear ends the current sessions where they are: a compact made later covers
# only what comes after.
END_SESSIONS = """
UPDATE conversations SET ended_at = last_message_at
WHERE telegram_user_id = %s AND last_message_at IS NOT NULL
  AND (ended_at IS NULL OR ended_at < last_message_at)
"""
# ... and what was said before it makes no facts later.
SKIP_PENDING_FACTS = """
UPDATE messages SET facts_extracted = true
WHERE conversation_id IN (SELECT id FROM conversations WHERE telegram_user_id = %s)
  AND squashed_at IS NULL AND NOT facts_extracted
"""
DELETE_FACT = """
DELETE FROM facts WHERE telegram_user_id = %s AND member_id = %s AND key = %s
RETURNING key, value, valid_to
"""
# A group member's /memory clear: their facts, and what they said so far makes no facts
# later (the author of a stored message is its meta's `author`, from the update).
DELETE_MEMBER_FACTS = """
DELETE FROM facts WHERE telegram_user_id = %s AND member_id = %s RETURNING key, value, valid_to
"""
SKIP_MEMBER_PENDING_FACTS = """
UPDATE messages SET facts_extracted = true
WHERE conversation_id IN (SELECT id FROM conversations WHERE telegram_user_id = %s)
  AND squashed_at IS NULL AND NOT facts_extracted AND (meta ->> 'author')::bigint = %s
"""
DELETE_FACTS = "DELETE FROM facts WHERE telegram_user_id = %s RETURNING key, value, valid_to"
# ... and the lines of theirs in the texts /new kept for extraction (pending_facts):
# every message is one line there, labelled by its author (src/graph/memory/fact_members.py).
PENDING_TEXTS = "SELECT id, text FROM pending_facts WHERE telegram_user_id = %s FOR UPDATE"
SET_PENDING_TEXT = "UPDATE pending_facts SET text = %s WHERE id = %s"
DELETE_PENDING_TEXT = "DELETE FROM pending_facts WHERE id = %s"
# A person's /erase reaches every group where memory about them is kept or may yet be
# made: their facts as a member's, their messages not extracted yet (their author, as
# SKIP_MEMBER_PENDING_FACTS reads it), their lines in texts kept for facts. There it is
# their /memory clear as a member (MemberFacts); the groups' conversations and own facts
# stay the groups'.
MEMBER_GROUPS = """
SELECT telegram_user_id FROM facts
WHERE member_id = %(person)s AND telegram_user_id <> %(person)s
UNION
SELECT c.telegram_user_id FROM messages m JOIN conversations c ON c.id = m.conversation_id
WHERE m.squashed_at IS NULL AND NOT m.facts_extracted AND c.telegram_user_id <> %(person)s
  AND (m.meta ->> 'author')::bigint = %(person)s
UNION
SELECT telegram_user_id FROM pending_facts
WHERE telegram_user_id <> %(person)s AND strpos(text, %(line)s) > 0
ORDER BY 1
"""
# ... and the groups' tasks keep running, no longer charged to them.
FORGET_REQUESTER = "UPDATE scheduled_tasks SET requested_by = NULL WHERE requested_by = %s"
DELETE_COMPACT = """
DELETE FROM session_compacts WHERE telegram_user_id = %s AND id = %s
RETURNING summary, last_action
"""
DELETE_COMPACTS = """
DELETE FROM session_compacts WHERE telegram_user_id = %s RETURNING summary, last_action
"""
DELETE_PENDING_FACTS = "DELETE FROM pending_facts WHERE telegram_user_id = %s"

OWNER_COLUMNS = ("telegram_user_id", "owner_id")
# Tables whose owner rows `erase` keeps (see the module's doc).
KEPT = frozenset({"llm_calls", "turn_leases"})
OWNER_TABLES = """
SELECT c.table_name, c.column_name FROM information_schema.columns c
JOIN information_schema.tables t
  ON t.table_schema = c.table_schema AND t.table_name = c.table_name
WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
  AND c.column_name = ANY(%s)
ORDER BY c.table_name, c.column_name
"""
# Which table refers to which (foreign keys): the referring rows go first.
REFERENCES = """
SELECT child.relname AS child, parent.relname AS parent FROM pg_constraint k
JOIN pg_class child ON child.oid = k.conrelid
JOIN pg_class parent ON parent.oid = k.confrelid
WHERE k.contype = 'f' AND k.connamespace = current_schema()::regnamespace
"""
DELETE_THREAD_ROWS = (
    "DELETE FROM checkpoint_writes WHERE thread_id = ANY(%s)",
    "DELETE FROM checkpoint_blobs WHERE thread_id = ANY(%s)",
    "DELETE FROM checkpoints WHERE thread_id = ANY(%s)",
)
# The chat's updates go; their ids stay, bare, in `inbox_erased` until the inbox's pruning
# (src/storage/delivery_repo.py), so that Telegram sending one again is still refused. An
# update not handled yet (it came after the erase) stays to be answered, except `current`
# (the one asking for the erase).
DELETE_INBOX = """
WITH gone AS (
    DELETE FROM inbox WHERE chat_id = %s AND (done_at IS NOT NULL OR update_id = %s)
    RETURNING update_id
)
INSERT INTO inbox_erased (update_id) SELECT update_id FROM gone ON CONFLICT DO NOTHING
"""
DELETE_OUTBOX = "DELETE FROM outbox WHERE chat_id = %s"
# The owner's model calls become one row per day (of `zone`), sender (a group's member:
# their budgets count its turns), purpose, model, status and estimate, without
# conversation, turn, latency or error: the budgets of the current period still count
# them (erasing must not reset a budget); rows of days before `kept_since` (the budget's
# month) lose the owner and sender ids too.
COLLAPSE_CALLS = """
WITH gone AS (DELETE FROM llm_calls WHERE owner_id = %(owner)s RETURNING *)
INSERT INTO llm_calls (at, owner_id, sender_id, purpose, model, input_tokens, cached_tokens,
    output_tokens, audio_seconds, estimated, status, calls)
SELECT max(at), CASE WHEN max(at) >= %(kept_since)s THEN %(owner)s::bigint END,
    CASE WHEN max(at) >= %(kept_since)s THEN sender_id END, purpose, model,
    sum(input_tokens), sum(cached_tokens), sum(output_tokens), sum(audio_seconds), estimated,
    status, sum(calls)
FROM gone
GROUP BY date_trunc('day', at, %(zone)s), sender_id, purpose, model, estimated, status
"""


@dataclass(frozen=True)
class FactKey:
    """One fact of the owner, by its stored key: it goes with its history. `member`: in a
    group, the member whose fact it is (0: the group's own, or a private chat's)."""

    key: str
    member: int = 0


@dataclass(frozen=True)
class MemberFacts:
    """Every fact of one group member (with its history), and what they said so far
    makes no facts later: a member's /memory clear. The group's facts and compacts stay."""

    member: int


@dataclass(frozen=True)
class CompactId:
    """One compact of a previous conversation, by its id."""

    compact_id: int


@dataclass(frozen=True)
class Context:
    """/forget: the context of the owner's current conversation in `topic` (its running
    summary; what it holds so far is never summarized or fact-extracted; its window
    starts empty), and reminders off. The messages stay stored."""

    topic: int = 0


@dataclass(frozen=True)
class AllMemory:
    """Every fact (with its history) and compact of the owner, and the texts kept for
    facts (/memory clear); what was said before makes no facts or compacts later."""


Memory = FactKey | CompactId | AllMemory | MemberFacts | Context


@dataclass
class Deleted:
    """What a delete of memory removed."""

    facts: int = 0
    """Current facts deleted (their history went with them)."""
    rows: int = 0
    """Fact rows deleted, their history's included."""
    compacts: int = 0
    epoch: MemoryEpoch | None = None
    """The owner's memory epoch after the delete."""
    needles: Needles = field(default_factory=Needles)
    """What identifies what was deleted (for redacting checkpoints written later)."""
    redacted: int = 0
    """Checkpoint values rewritten or dropped."""


@dataclass
class Erased:
    """What `erase` removed, by table (rows); `threads`: checkpoint threads."""

    rows: dict[str, int] = field(default_factory=dict)
    threads: int = 0

    def count(self, table: str) -> int:
        """Return how many rows of `table` went."""
        return self.rows.get(table, 0)


def without_member(text: str, member: int) -> str:
    """Return an extractor's text without the lines of `member` (their own words and what
    they passed on); "" when nothing else is left."""
    labels = (f"[member {member}]: ", f"[shared by member {member}]: ")
    kept = [line for line in text.split("\n") if not line.startswith(labels)]
    said = any(line.startswith("[") and not line.startswith("[assistant]") for line in kept)
    return "\n".join(kept) if said else ""


async def _drop_member_lines(conn: Conn, owner: int, member: int) -> None:
    """Take a member's lines out of the group's texts waiting for fact extraction, so
    what they said before their /memory clear makes no facts of theirs later."""
    for row in await (await conn.execute(PENDING_TEXTS, (owner,))).fetchall():
        text = without_member(row["text"], member)
        if not text:
            await conn.execute(DELETE_PENDING_TEXT, (row["id"],))
        elif text != row["text"]:
            await conn.execute(SET_PENDING_TEXT, (text, row["id"]))


def _current(rows: list[dict[str, Any]]) -> int:
    return sum(r.get("valid_to") is None for r in rows)


class ErasureRepository(Repository):
    """Deletes of memory and of everything of an owner, always scoped to one owner id."""

    async def delete(self, owner: int, what: Memory, conn: Conn | None = None) -> Deleted:
        """Delete `what` of the owner, move them to a new memory epoch and redact it from
        their checkpoints, in one transaction."""
        async with self._conn(conn) as c, c.transaction():
            if isinstance(what, Context):
                return await self._forget(c, owner, what)
            if isinstance(what, AllMemory):
                await c.execute(LOCK_CONVERSATIONS, (owner,))
                await c.execute(END_SESSIONS, (owner,))
            done = Deleted(epoch=await bump_epoch(c, owner))
            facts: list[dict[str, Any]] = []
            compacts: list[dict[str, Any]] = []
            if isinstance(what, FactKey):
                cur = await c.execute(DELETE_FACT, (owner, what.member, what.key))
                facts = list(await cur.fetchall())
            elif isinstance(what, MemberFacts):
                await c.execute(SKIP_MEMBER_PENDING_FACTS, (owner, what.member))
                await _drop_member_lines(c, owner, what.member)
                cur = await c.execute(DELETE_MEMBER_FACTS, (owner, what.member))
                facts = list(await cur.fetchall())
            elif isinstance(what, CompactId):
                cur = await c.execute(DELETE_COMPACT, (owner, what.compact_id))
                compacts = list(await cur.fetchall())
            else:
                await c.execute(SKIP_PENDING_FACTS, (owner,))
                await c.execute(DELETE_PENDING_FACTS, (owner,))
                facts = list(await (await c.execute(DELETE_FACTS, (owner,))).fetchall())
                compacts = list(await (await c.execute(DELETE_COMPACTS, (owner,))).fetchall())
            done.facts, done.rows, done.compacts = _current(facts), len(facts), len(compacts)
            done.needles = fact_needles(facts) + compact_needles(compacts)
            done.redacted = await redact_owner(c, owner, done.needles)
            return done

    async def _forget(self, c: Conn, owner: int, what: Context) -> Deleted:
        """/forget (in the caller's transaction): the memory work under way reads no
        further into what it forgets (a new epoch), in the order the locks are taken
        everywhere: the conversations, the owner's row, the messages."""
        conversations = ConversationRepository(self.pool)
        conversation_id = await conversations.get_or_create_conversation(
            owner, conn=c, topic=what.topic
        )
        await c.execute(LOCK_CONVERSATIONS, (owner,))
        done = Deleted(epoch=await bump_epoch(c, owner))
        users = UsersRepository(self.pool)
        if what.topic:  # the topic's window only (forget_summary)
            await users.set_reminders(owner, False, conn=c)
        else:
            await users.forget(owner, conn=c)
        await conversations.forget_summary(conversation_id, conn=c)
        await conversations.skip_facts(conversation_id, conn=c)
        return done

    async def redact(self, owner: int, needles: Needles, conn: Conn | None = None) -> int:
        """Redact `needles` from the owner's checkpoints again (those written since)."""
        async with self._conn(conn) as c, c.transaction():
            return await redact_owner(c, owner, needles)

    async def erase(
        self,
        owner: int,
        kept_since: datetime,
        zone: str = "UTC",
        current_update: int | None = None,
    ) -> Erased:
        """Delete everything of the owner (see the module's doc) in one transaction;
        `kept_since`: the start of the budget period whose usage totals keep the owner's id;
        `zone`: the time zone of the totals' days; `current_update`: the update asking for
        it, whose inbox row goes too."""
        erased = Erased()
        async with self._conn() as c, c.transaction():
            await c.execute(LOCK_CONVERSATIONS, (owner,))
            await bump_epoch(c, owner)
            threads = await owner_threads(c, owner, everywhere=True)
            if threads:
                for statement in DELETE_THREAD_ROWS:
                    await c.execute(statement, (threads,))
            erased.threads = len(threads)
            for table, column in await self._owner_tables(c):
                query = sql.SQL("DELETE FROM {} WHERE {} = %s").format(
                    sql.Identifier(table), sql.Identifier(column)
                )
                cur = await c.execute(query, (owner,))
                erased.rows[table] = erased.rows.get(table, 0) + cur.rowcount
            if owner > 0:  # a person (groups have negative ids)
                for group in await self.member_groups(owner, c):
                    done = await self.delete(group, MemberFacts(owner), c)
                    erased.rows["facts"] = erased.rows.get("facts", 0) + done.rows
                await c.execute(FORGET_REQUESTER, (owner,))
            erased.rows["inbox"] = (await c.execute(DELETE_INBOX, (owner, current_update))).rowcount
            erased.rows["outbox"] = (await c.execute(DELETE_OUTBOX, (owner,))).rowcount
            totals = {"owner": owner, "kept_since": kept_since, "zone": zone}
            await c.execute(COLLAPSE_CALLS, totals)
        return erased

    async def member_groups(self, person: int, conn: Conn | None = None) -> list[int]:
        """Return the groups where memory about `person` as a member is kept or may yet
        be made (see MEMBER_GROUPS), in id order."""
        params = {"person": person, "line": f"member {person}]: "}
        async with self._conn(conn) as c:
            cur = await c.execute(MEMBER_GROUPS, params)
            return [row["telegram_user_id"] for row in await cur.fetchall()]

    async def _owner_tables(self, conn: Conn) -> list[tuple[str, str]]:
        """Return (table, owner column) of every table erased by owner, the tables that
        refer to others before them (the owner's row in `users` last)."""
        rows = await (await conn.execute(OWNER_TABLES, (list(OWNER_COLUMNS),))).fetchall()
        found = [(r["table_name"], r["column_name"]) for r in rows if r["table_name"] not in KEPT]
        edges = [
            (r["child"], r["parent"]) for r in await (await conn.execute(REFERENCES)).fetchall()
        ]
        names = {t for t, _ in found}
        ordered: list[str] = []
        left = sorted(names - {"users"})
        while left:
            # A table no other table left refers to goes now (a cycle: in name order).
            free = [t for t in left if not any(p == t != c and c in left for c, p in edges)]
            pick = free[0] if free else left[0]
            ordered.append(pick)
            left.remove(pick)
        if "users" in names:
            ordered.append("users")
        rank = {t: i for i, t in enumerate(ordered)}
        return sorted(found, key=lambda f: rank[f[0]])
