"""Property (issue 40): what a delete promises to delete stays deleted, everywhere, and
nothing else goes with it.

Random sequences over two people (Ann, who administers the group, and Bob): their private
chats, a topic of each private chat (`/new topic`), and a group where both write and each
has facts as a member. Each message carries a unique mark (`SECRET-<n>-e<example>z`),
said as a fact ("my k<n> is <mark>"), as a plain note, or for the model to remember (it
calls `remember_fact`); memory work runs often (facts after every message, a small
window, so summaries fold and `/new` compacts), with a memory model that is sometimes
slow (work still under way when a delete comes), failing (5xx) or refusing (a 400, or
Azure's `content_filter`). Deletes: `/forget` (in General, in a topic, the group's),
`/memory clear` (a private owner's, a member's in the group, the group administrator's),
`/erase` (a person's, which reaches the group they wrote in, and the group's), a
previous conversation's 🗑, the model's `forget_fact`, and `/new`. The real Application
against the fake Bot API, the fake models through the real client, real PostgreSQL.

After every step, for every delete so far, what docs/memory.md says it deletes (KEEPS
below lists what it says stays) is checked:
- in a scan of every table and column of the database (bytea decompressed: checkpoints);
- in every model request (chat or memory model) made after the delete;
and nothing of another chat or person went with it: a mark that was in `messages`,
`facts` or `session_compacts` before a delete that does not reach it is there after.
On every chat request, nothing of another chat's is shown: no private mark in a group or
another person's private chat, no group mark in a private chat, and in the group no
other member's facts.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.db_scan import values
from tests.e2e.conftest import CHAT_MODEL, SIDE_MODEL, RunningBot, until
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.memory_model import memory_reply
from tests.fakes.openai_server import Fault, message_text

BOT = "@tgagent_test_bot"
EXAMPLES = itertools.count(1)
MARK = re.compile(r"SECRET-\d+-e\d+z")
# How a fact is shown (the prompt's facts, the extractor's known facts): a line
# `- [labels] key: value`.
FACT_LINE = re.compile(r"- (?:\[[^\]\n]*\] )*\w+: (SECRET-\d+-e\d+z)")
# How a compact is shown: the fake compact model's summary.
COMPACT_LINE = re.compile(r"Talked about: [^\n\\]*")

# What docs/memory.md says each delete keeps, in the stores this test looks at (the rest
# of what a delete is said to remove is checked):
KEEPS = {
    "/forget": "every message (and what holds them: inbox, outbox, checkpoints), facts and "
    "compacts made before it",
    "/memory clear": "the messages, the running summary, the rest of the checkpoints",
    "/erase (a person's)": "their messages in groups (the group's conversation, summary, "
    "compacts, the group chat's inbox), usage totals without content",
    "/new": "facts, compacts, the texts kept for facts, the chat's inbox and outbox",
}
# Where a conversation's messages live, which /new wipes (with its checkpoint threads;
# the new conversation's checkpoints show the facts and compacts that stay).
CONVERSATION_TABLES = ("messages", "conversations", "squash_log", "message_embeddings")
THREAD_ROWS = """
SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = ANY(%(t)s))
     + (SELECT count(*) FROM checkpoint_blobs WHERE thread_id = ANY(%(t)s))
     + (SELECT count(*) FROM checkpoint_writes WHERE thread_id = ANY(%(t)s)) AS n
"""
FACT_TABLES = ("facts", "pending_facts")
# Where a mark, once there, stays until a delete reaches it.
LASTING = {"messages", "facts", "session_compacts"}

# A memory model refusing, as OpenAI's moderation (a 400) and Azure's output filter do.
REFUSALS = {
    "400": Fault(400, {"error": {"message": "content filtered", "type": "invalid_request"}}),
    "content_filter": {"content": "", "finish_reason": "content_filter"},
}
PEOPLE = st.sampled_from((0, 1))  # Ann, Bob
SAY = st.tuples(
    st.sampled_from(("fact", "note", "remember")),
    PEOPLE,
    st.sampled_from(("private", "topic", "group")),
)
OPS = st.one_of(
    SAY,
    st.tuples(st.just("/forget"), st.sampled_from((0, 1, "group"))),
    st.tuples(st.just("/forget topic"), PEOPLE),
    st.tuples(st.just("/memory clear"), PEOPLE, st.sampled_from(("private", "group"))),
    st.tuples(st.just("/new"), st.sampled_from((0, 1, "group"))),
    st.tuples(st.just("/erase"), st.sampled_from((0, 1, "group"))),
    st.tuples(st.just("slow"), st.integers(1, 4)),
    st.tuples(st.just("fail"), st.integers(1, 3)),
    st.tuples(st.just("refuse"), st.sampled_from(("400", "content_filter")), st.integers(1, 3)),
    st.tuples(st.just("🗑"), st.sampled_from((0, 1, "group"))),
    st.tuples(st.just("forget_fact"), PEOPLE, st.sampled_from(("private", "group"))),
    st.tuples(st.just("drain")),
)
SEQUENCES = st.lists(st.one_of(SAY, OPS), min_size=4, max_size=24)


@dataclass(frozen=True)
class Said:
    """A mark someone said: `chat` is the memory owner (a person, or the group)."""

    mark: str
    author: int
    chat: int
    topic: int
    fact: bool
    conversation: int
    """Which conversation of the chat's topic (a /new or /erase starts another)."""
    remembered: bool = False
    """Through `remember_fact`, as `r<n>`."""


@dataclass
class Promise:
    """What a delete promised: marks that must be absent from some stores from now on."""

    what: str
    marks: set[str]
    tables: tuple[str, ...] | None = None
    """Tables (None: every table) that must not hold the marks."""
    fact_lines: bool = False
    """Neither a table nor a later request may show them as a fact (`key: mark`)."""
    compact_lines: bool = False
    """Neither a table nor a later request may show them in a compact."""
    any_form: bool = False
    """No later request may hold them at all."""
    since: int = 0
    """The index of the first model request after the delete."""
    threads: list[str] = field(default_factory=list)
    """Checkpoint threads that must hold no rows."""


@dataclass
class Scan:
    """Where each mark is in the database: table.column, and as a fact or compact line."""

    where: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    fact_lines: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    compact_lines: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def tables(self, mark: str) -> set[str]:
        return {w.split(".", 1)[0] for w in self.where.get(mark, set())}


async def scan(pool: Any) -> Scan:
    """Read every value of the database once and find the marks in it."""
    found = Scan()
    async for where, text in values(pool):
        for mark in MARK.findall(text):
            found.where[mark].add(where)
        for mark in FACT_LINE.findall(text):
            found.fact_lines[mark].add(where)
        for line in COMPACT_LINE.findall(text):
            for mark in MARK.findall(line):
                found.compact_lines[mark].add(where)
    return found


def tool_call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Return a chat-model reply that calls one tool."""
    return {"tool_calls": [{"name": name, "args": args}]}


def request_text(request: dict[str, Any]) -> str:
    """Return everything a model request carries, as one text."""
    return "\n".join(message_text(m) for m in request.get("messages", []))


class Run:
    """One example: two people, their private chats and topics, and a group."""

    def __init__(self, bot: RunningBot, tg: FakeBotAPI, llm: Any, pool: Any) -> None:
        self.bot, self.tg, self.llm, self.pool = bot, tg, llm, pool
        self.example = next(EXAMPLES)
        base = 9_600_000 + 10 * self.example
        self.people = (base + 1, base + 2)
        self.group = -100_960_000 - self.example
        self.topics: dict[int, int] = {}  # a person's private topic
        self.said: list[Said] = []
        self.promises: list[Promise] = []
        self.n = 0
        self.slow = 0
        self.conversations = bot.runtime.deps.conversations
        self.conversation: dict[tuple[int, int], int] = defaultdict(int)
        tg.set_chat_admins(self.group, self.people[0])

    # ----- the memory model ---------------------------------------------------------------

    async def memory_model(self, request: dict[str, Any]) -> Any:
        """The memory model: slower than the user while `slow`, else as memory_reply."""
        if self.slow > 0:
            self.slow -= 1
            await asyncio.sleep(0.4)
        return memory_reply(request)

    # ----- driving the bot ----------------------------------------------------------------

    async def push(self, person: int, text: str, where: str = "private") -> None:
        """Send a text as the person and wait until the bot has handled it."""
        kw: dict[str, Any] = {"language_code": "en", "first_name": f"P{person}"}
        chat = person
        if where == "group":
            chat = self.group
            kw |= {"chat_id": self.group, "chat_type": "supergroup"}
        elif where == "topic":
            kw["topic"] = await self.topic(person)
        update = self.tg.push_text(person, text, **kw)
        await self.handled(update, chat, text.startswith("/erase"))

    async def handled(self, update: int, chat: int, erase: bool) -> None:
        """Wait until the update's job is done (an /erase: until its row is gone and the
        reply sent)."""
        deadline = time.monotonic() + 30
        seen = False
        while time.monotonic() < deadline:
            async with self.pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT done_at FROM inbox WHERE update_id = %s", (update,)
                )
                row = await cur.fetchone()
            if row is not None:
                seen = True
                if row["done_at"] is not None:
                    return
            elif erase and (seen or self.erase_answered(chat)):
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"update {update} was not handled")

    def erase_answered(self, chat: int) -> bool:
        sent = [m for m in self.tg.messages_to(chat) if m["method"] == "sendMessage"]
        return bool(sent) and sent[-1]["text"].startswith("Done: I erased")

    async def topic(self, person: int) -> int:
        """Return the person's private topic, opening it with `/new topic` first."""
        if person not in self.topics:
            before = len(self.tg.created_topics)
            self.tg.push_text(person, "/new topic Notes", language_code="en")
            await until(lambda: len(self.tg.created_topics) > before, 20)
            self.topics[person] = int(self.tg.created_topics[-1]["message_thread_id"])
        return self.topics[person]

    # ----- the steps ----------------------------------------------------------------------

    async def apply(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind in ("fact", "note", "remember"):
            await self.say(kind, self.people[op[1]], op[2])
        elif kind == "slow":
            self.slow += op[1]
        elif kind == "fail":
            self.llm.script_for(SIDE_MODEL, *[Fault(500)] * op[1])
        elif kind == "refuse":
            self.llm.script_for(SIDE_MODEL, *[REFUSALS[op[1]]] * op[2])
        elif kind == "drain":
            await self.bot.runtime.service.drain()
        else:
            before, made = await scan(self.pool), len(self.promises)
            await self.delete(op, before)
            after = await scan(self.pool)
            self.untouched(before, after, self.promises[made:], op)
            await self.check(after)
            return
        await self.check(await scan(self.pool))

    async def say(self, kind: str, person: int, where: str) -> None:
        """Tell the bot a mark: as a fact the extractor finds, as a plain note, or asking
        it to remember it (the model calls `remember_fact`)."""
        self.n += 1
        mark = f"SECRET-{self.n}-e{self.example}z"
        fact = kind != "note"
        text = {"fact": f"my k{self.n} is", "note": "note", "remember": "please remember"}[kind]
        text += f" {mark}"
        if kind == "remember":
            args = {"key": f"r{self.n}", "value": mark, "type": "fact"}
            self.llm.script_for(CHAT_MODEL, tool_call("remember_fact", args), "Ok.")
        chat = self.group if where == "group" else person
        topic = await self.topic(person) if where == "topic" else 0
        conversation = self.conversation[(chat, topic)]
        said = Said(mark, person, chat, topic, fact, conversation, kind == "remember")
        self.said.append(said)
        start = len(self.llm.requests_for(CHAT_MODEL))
        await self.push(person, f"{BOT} {text}" if where == "group" else text, where)
        self.isolated(self.llm.requests_for(CHAT_MODEL)[start:], person, chat)

    def marks(
        self, chat: int, topic: int | None = None, author: int | None = None, now: bool = False
    ) -> set[str]:
        """Return the marks said so far in `chat` (in `topic`; by `author`; `now`: in
        the topic's current conversation)."""
        return {
            s.mark
            for s in self.said
            if s.chat == chat
            and (topic is None or s.topic == topic)
            and (author is None or s.author == author)
            and (not now or s.conversation == self.conversation[(s.chat, s.topic)])
        }

    async def press_compact(self, person: int, where: str, chat: int) -> set[str]:
        """Press the 🗑 of the first previous conversation `/memory` shows; return the
        marks its compact held (none: there was none)."""
        await self.push(person, "/memory", where)
        page = [m for m in self.tg.messages_to(chat) if m["method"] == "sendMessage"][-1]
        markup = (self.tg.bot_message(chat, page["message_id"]) or {}).get("reply_markup") or {}
        buttons = [b["callback_data"] for row in markup.get("inline_keyboard", []) for b in row]
        data = next((d for d in buttons if d.startswith("mem:c:")), None)
        if data is None:
            return set()
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT summary FROM session_compacts WHERE id = %s", (int(data.split(":")[2]),)
            )
            row = await cur.fetchone()
        answers = len(self.tg.callback_answers)  # a press is answered, not queued
        self.tg.push_callback(person, chat, page["message_id"], data)
        await until(lambda: len(self.tg.callback_answers) > answers, 30)
        return set(MARK.findall(row["summary"])) if row else set()

    async def target(self, op: tuple[Any, ...]) -> tuple[int, str, int, int]:
        """Return who sends a delete, where (private, topic, group), the chat and topic."""
        kind, who = op[0], op[1]
        person = self.people[0] if who == "group" else self.people[who]  # Ann: the admin
        where = "group" if who == "group" else "private"
        if kind in ("/memory clear", "forget_fact"):
            where = op[2]
        elif kind == "/forget topic":
            where = "topic"
        chat = self.group if where == "group" else person
        topic = await self.topic(person) if where == "topic" else 0
        return person, where, chat, topic

    async def delete(self, op: tuple[Any, ...], before: Scan) -> None:
        """Send the delete and record what it promises (`before`: the database just
        before it)."""
        kind = op[0]
        person, where, chat, topic = await self.target(op)
        what = f"{op} by {person}"
        if kind == "forget_fact":
            remembered = [
                s for s in self.said if s.chat == chat and s.author == person and s.remembered
            ]
            if not remembered:
                return
            key = f"r{remembered[-1].mark.split('-')[1]}"
            self.llm.script_for(CHAT_MODEL, tool_call("forget_fact", {"key": key}), "Ok.")
            await self.push(
                person, f"{BOT} forget my {key}" if where == "group" else f"forget {key}", where
            )
            marks = {remembered[-1].mark}
            since = len(self.llm.requests)
            # The turn's record is redacted once written, just after the reply was
            # handed over (the job may be done a moment before).
            deadline = time.monotonic() + 5
            while (await scan(self.pool)).fact_lines.get(remembered[-1].mark):
                if time.monotonic() > deadline:
                    break  # the check says where
                await asyncio.sleep(0.05)
            self.promises.append(Promise(what, marks, ("facts",), fact_lines=True, since=since))
            return
        if kind == "🗑":
            gone = await self.press_compact(person, where, chat)
            self.promises.append(
                Promise(
                    what,
                    gone,
                    ("session_compacts",),
                    compact_lines=True,
                    since=len(self.llm.requests),
                )
            )
            return
        old = [str(c) for c in await self.conversations.conversation_ids(chat, topic=0)]
        command = "/forget" if kind == "/forget topic" else kind
        await self.push(person, command + (" yes" if kind == "/erase" else ""), where)
        since = len(self.llm.requests)

        def promise(marks: set[str], tables: tuple[str, ...] | None, **kw: Any) -> None:
            self.promises.append(Promise(what, marks, tables, since=since, **kw))

        if kind in ("/forget", "/forget topic"):
            # The conversation's marks so far: no model sees them again, and they never
            # become a fact, a compact, a kept text or part of the summary; those that
            # facts and compacts held already (before it, or made by work that committed
            # before it) stay there.
            now = await scan(self.pool)
            said = self.marks(chat, topic, now=True)

            def held(m: str) -> set[str]:
                return before.tables(m) | now.tables(m)

            for table in ("facts", "session_compacts", "pending_facts"):
                promise({m for m in said if table not in held(m)}, (table,))
            promise(said, ("conversations",))  # the summary is emptied
            kept = {m for m in said if held(m) & {"facts", "session_compacts"}}
            promise(said - kept, (), any_form=True)
            return
        if kind == "/memory clear":
            admin = where == "private" or person == self.people[0]
            said = self.marks(chat) if admin else self.marks(chat, author=person)
            tables = FACT_TABLES + (("session_compacts",) if admin else ())
            promise(said, tables, fact_lines=True, compact_lines=admin)
            return
        if kind == "/erase":
            said = self.marks(chat)
            promise(said, None, fact_lines=True, compact_lines=True, any_form=True)
            for place in [k for k in self.conversation if k[0] == chat] + [(chat, 0)]:
                self.conversation[place] += 1
            if where == "private":  # and their facts as a member of the group
                mine = self.marks(self.group, author=person)
                promise(mine, FACT_TABLES, fact_lines=True)
            return
        # /new: the conversation goes, with its checkpoints (its facts and compact stay).
        said = self.marks(chat, 0)
        promise(said, CONVERSATION_TABLES, threads=old)
        self.conversation[(chat, 0)] += 1

    # ----- the checks ---------------------------------------------------------------------

    async def check(self, found: Scan) -> None:
        """Check every promise so far against the database (`found`) and the requests
        since."""
        for promise in self.promises:
            for mark in promise.marks:
                where = found.where.get(mark, set())
                if promise.tables is None:
                    bad = where
                else:
                    bad = {w for w in where if w.split(".", 1)[0] in promise.tables}
                if promise.fact_lines:
                    bad |= {f"{w} (as a fact)" for w in found.fact_lines.get(mark, set())}
                if promise.compact_lines:
                    bad |= {f"{w} (in a compact)" for w in found.compact_lines.get(mark, set())}
                assert not bad, (
                    f"{promise.what}: {mark} is still in {sorted(bad)}; {promise}, {self.said}"
                )
            self.requests_keep(promise)
            if promise.threads:
                async with self.pool.connection() as conn:
                    cur = await conn.execute(THREAD_ROWS, {"t": promise.threads})
                    left = (await cur.fetchone())["n"]
                assert not left, f"{promise.what}: {left} checkpoint rows of its threads"

    def requests_keep(self, promise: Promise) -> None:
        """Check that no model request since the promise shows what it deleted."""
        for i, request in enumerate(self.llm.requests[promise.since :], promise.since):
            text = request_text(request)
            if promise.any_form:
                leaked = promise.marks & set(MARK.findall(text))
                assert not leaked, f"{promise.what}: request {i} holds {sorted(leaked)}"
            if promise.fact_lines:
                leaked = promise.marks & set(FACT_LINE.findall(text))
                assert not leaked, f"{promise.what}: request {i} shows {sorted(leaked)} as facts"
            if promise.compact_lines:
                shown = {m for line in COMPACT_LINE.findall(text) for m in MARK.findall(line)}
                leaked = promise.marks & shown
                assert not leaked, f"{promise.what}: request {i} shows {sorted(leaked)} in compacts"

    def isolated(self, requests: list[dict[str, Any]], person: int, chat: int) -> None:
        """Check that the chat requests of a turn in `chat` show nothing of another's."""
        for request in requests:
            text = request_text(request)
            shown = set(MARK.findall(text))
            for s in self.said:
                if s.mark not in shown:
                    continue
                if chat == self.group:
                    assert s.chat == self.group, f"{s} (a private mark) in a group request"
                else:
                    assert s.chat == chat, f"{s} in {person}'s private request"
            for mark in FACT_LINE.findall(text):
                whose = next((s for s in self.said if s.mark == mark), None)
                if whose is not None and chat == self.group:
                    assert whose.author == person, f"{whose}: another's fact in {person}'s turn"

    def untouched(
        self, before: Scan, after: Scan, promises: list[Promise], op: tuple[Any, ...]
    ) -> None:
        """Check that the delete took nothing it did not promise: a mark stays in the
        messages, facts and compacts that held it, unless the delete promised otherwise."""
        for s in self.said:
            allowed = set().union(
                *(
                    set(p.tables) if p.tables is not None else LASTING
                    for p in promises
                    if s.mark in p.marks
                )
            )
            lost = (before.tables(s.mark) - after.tables(s.mark)) & LASTING - allowed
            assert not lost, f"{op} took {s} from {sorted(lost)}"

    async def finish(self) -> None:
        """Let every piece of memory work end, then check once more."""
        await self.bot.runtime.service.drain()
        await self.check(await scan(self.pool))


@pytest.fixture
async def privacy_bot(start_bot: Any, tg: FakeBotAPI, llm: Any) -> RunningBot:
    """The bot every example of the property drives (examples use fresh ids)."""
    llm.default_reply = "Ok."
    tg.private_topics = True
    return await start_bot(
        facts_every=1,
        max_context=4,
        summary_trigger=1,
        max_compacts=50,
        stream_replies=False,
    )


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=SEQUENCES)
# Deletes that come while the memory model is still working on what they delete.
@example(
    ops=[
        ("slow", 3),
        ("fact", 0, "private"),
        ("/forget", 0),
        ("slow", 3),
        ("fact", 1, "group"),
        ("/erase", 1),
        ("slow", 3),
        ("fact", 0, "topic"),
        ("note", 0, "topic"),
        ("/forget topic", 0),
        ("slow", 4),
        ("fact", 0, "group"),
        ("fact", 1, "group"),
        ("/memory clear", 1, "group"),
        ("slow", 3),
        ("fact", 1, "private"),
        ("/memory clear", 1, "private"),
        ("/new", 1),
        ("drain",),
    ]
)
@example(
    ops=[
        ("fact", 0, "private"),
        ("remember", 0, "private"),
        ("remember", 1, "group"),
        ("drain",),
        ("forget_fact", 1, "group"),
        ("forget_fact", 0, "private"),
        ("/new", 0),
        ("fact", 1, "group"),
        ("fact", 0, "group"),
        ("drain",),
        ("/new", "group"),
        ("🗑", 0),
        ("🗑", "group"),
        ("fact", 0, "private"),
        ("refuse", "content_filter", 2),
        ("fact", 0, "private"),
        ("/new", 0),
        ("drain",),
    ]
)
@example(
    ops=[
        ("/new", "group"),
        ("/forget topic", 0),
        ("note", 1, "group"),
        ("/erase", 1),
        ("/new", "group"),
        ("fail", 3),
        ("/memory clear", 1, "group"),
    ]
)
@pytest.mark.slow
async def test_what_a_delete_deletes_stays_deleted_everywhere(
    privacy_bot: RunningBot, tg: FakeBotAPI, llm: Any, pool: Any, ops: list[tuple[Any, ...]]
) -> None:
    run = Run(privacy_bot, tg, llm, pool)
    llm.default_for(SIDE_MODEL, run.memory_model)
    for op in ops:
        await run.apply(op)
    await run.finish()
