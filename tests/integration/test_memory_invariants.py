"""Property (issue 30): at EVERY request of the chat model, every message the user wrote since
the last `/new` (and not forgotten) is in that request's working memory or already folded
into the running summary that request carries; and no user message is folded twice.

Random sequences of turns (short, long, ones the memory model refuses), compressions by the
model (`compress_last`, `compress_range`) and by the user (`/compress`), `/forget`, `/new`,
and a memory model that is failing (5xx) or slower than the user for a while. The user
types on without waiting for the memory work (it is drained only at the end). Real
PostgreSQL, the real `ChatOpenAI` client against the local fake server."""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from src.graph import prompts
from src.services.agent_service import Identity
from tests.fakes.memory_model import MEMORY_MODEL
from tests.fakes.openai_server import Fault, message_text
from tests.memory_ledger import REFUSED, TOKEN, Ledger, summary_of

OWNERS = itertools.count(7_100_000)
SQUASHES = itertools.count(1)
NOTICE = re.compile(r"\[Note from the system: (\d+) earlier messages")
POISON = "zqxpoison"  # the memory model refuses any request with this word (a 400)
LONG = " ".join(f"word{i}." for i in range(700))  # ~2,000 tokens: the budget binds

OPS = st.one_of(
    st.tuples(st.just("turn")),
    st.tuples(st.just("long")),
    st.tuples(st.just("poison")),
    st.tuples(st.just("compress_last"), st.integers(1, 4)),
    st.tuples(st.just("compress_range"), st.integers(1, 5), st.integers(0, 3)),
    st.tuples(st.just("/compress")),
    st.tuples(st.just("/forget")),
    st.tuples(st.just("/new")),
    st.tuples(st.just("fail"), st.integers(1, 6)),
    st.tuples(st.just("slow"), st.integers(1, 4)),
)
# Mostly turns: the window must fill and overflow for the summarizer to have work.
SEQUENCES = st.lists(st.one_of(st.tuples(st.just("turn")), OPS), min_size=5, max_size=35)


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args}]}


class Run:
    """One owner's conversation driven through the service, checked at every request."""

    def __init__(self, rt: Any, llm: Any, ledger: Ledger, pool: Any) -> None:
        self.rt, self.llm, self.ledger, self.pool = rt, llm, ledger, pool
        self.who = Identity(next(OWNERS), "p", "P", "en")
        self.n = 0
        self.current: list[str] = []  # user-message tokens of the current conversation
        self.forgotten: set[str] = set()
        self.refused: set[str] = set()  # messages the memory model refuses
        self.conversations: set[Any] = set()
        self.checked = 0  # chat requests checked so far
        self.may_declare = True  # the memory model may be failing: omissions declared
        self.declared = 0
        self.slow_left = 0

    async def memory_model(self, request: dict[str, Any]) -> Any:
        """The memory model: refuses the poison word, sleeps while slow, else answers."""
        if any(POISON in message_text(m) for m in request["messages"]):
            return Fault(400, {"error": {"message": "content filtered", "type": "invalid"}})
        if self.slow_left > 0:
            self.slow_left -= 1
            await asyncio.sleep(0.3)  # longer than the turn's give-way (0.05 s here)
        return self.ledger.reply(request)

    async def turn(self, extra: str = "") -> None:
        self.n += 1
        token = f"u{self.n}"
        self.current.append(token)
        await self.rt.service.handle_message(self.who, f"{token} {extra}".strip())
        conv = await self.rt.deps.conversations.get_or_create_conversation(self.who.owner_id)
        self.conversations.add(conv)

    async def apply(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "compress_last":
            self.llm.script(call("compress_last", count=op[1], summary=f"S{next(SQUASHES)}"), "ok")
            await self.turn()
        elif kind == "compress_range":
            first, last = op[1], op[1] + op[2]
            summary = f"S{next(SQUASHES)}"
            self.llm.script(
                call("compress_range", **{"from": first, "to": last, "summary": summary})
            )
            self.llm.script("ok")
            await self.turn()
        elif kind == "/compress":
            summary = f"S{next(SQUASHES)}"
            self.llm.script(call("compress_range", **{"from": 1, "to": 2, "summary": summary}))
            self.llm.script("done")
            await self.rt.service.compress(self.who)
        elif kind == "/forget":
            await self.rt.service.forget(self.who)
            self.forgotten.update(self.current)
        elif kind == "/new":
            await self.rt.service.new_conversation(self.who)
            self.current, self.forgotten = [], set()
        elif kind == "fail":
            self.llm.script_for(MEMORY_MODEL, *[Fault(500)] * op[1])
        elif kind == "slow":
            self.slow_left += op[1]
        elif kind == "long":
            await self.turn(LONG)
        elif kind == "poison":
            self.refused.add(f"u{self.n + 1}")
            await self.turn(POISON)
        else:
            await self.turn()
        await self.check()

    async def check(self) -> None:
        """Check every chat request since the last check against the conversation."""
        await self.ledger.learn_squashes(self.pool, list(self.conversations))
        chat = [
            r
            for r in self.llm.requests
            if r.get("model") == self.rt.settings.llm_model
            and message_text(r["messages"][0]).startswith(prompts.SYSTEM_PROMPT)
        ]
        expected = [u for u in self.current if u not in self.forgotten]
        for request in chat[self.checked :]:
            shown = {
                u for m in request["messages"][1:] for u in self.ledger.tokens(message_text(m))
            }
            folded = {
                u for t in self.ledger.covered(summary_of(request)) for u in self.ledger.expand(t)
            }
            # A refused message is folded as a placeholder (that stands for it).
            placeholder = REFUSED in self.ledger.covered(summary_of(request))
            missing = [
                u
                for u in expected
                if u not in shown and u not in folded and not (u in self.refused and placeholder)
            ]
            # While the memory model keeps failing, a turn that could neither carry nor
            # fold its backlog says how many messages it leaves out (docs/memory.md):
            # declared, never silent, and never once the model is back (checked at the end).
            # The notice follows the current message: the last user message of the
            # request, which a tool round's later calls follow with the model's calls
            # and the tools' results.
            current = [m for m in request["messages"] if m.get("role") == "user"][-1]
            declared = NOTICE.search(message_text(current))
            allowed = int(declared.group(1)) if declared and self.may_declare else 0
            self.declared += bool(declared)
            assert len(missing) <= allowed, (missing, allowed, sorted(shown), sorted(folded))
            assert all(TOKEN.fullmatch(u) for u in shown)
        self.checked = len(chat)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=SEQUENCES)
# Found by this test: the summary model failed while a long message had to be folded (the
# background fold and the turn's own fold each met a failure).
@example(ops=[("turn",), ("turn",), ("long",), ("fail", 2), ("long",)])
# A squash over the fold edge (some of its messages folded ahead, some not), squashed again.
@example(
    ops=[("turn",)] * 5
    + [("compress_range", 1, 4), ("turn",), ("compress_last", 3)]
    + [("turn",)] * 5
)
@example(
    ops=[("turn",)] * 5
    + [("compress_range", 3, 3), ("turn",), ("compress_range", 1, 3)]
    + [("turn",)] * 5
)
@pytest.mark.slow
async def test_every_request_carries_every_message_or_its_summary(
    runtime_factory: Any, llm: Any, pool: Any, ops: list[tuple[Any, ...]]
) -> None:
    await drive(runtime_factory, llm, pool, ops)


async def test_a_notice_is_read_where_it_is_in_a_tool_round(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """Found by the property test: while the memory model failed, the turn after a long
    message left it out and said so, after the current message; the model then called a
    tool (the `compress_range` scripted for a /compress that found nothing to compress),
    and the request after the tool's result, which ends with that result, was taken for
    one that left a message out silently."""
    ops = [("long",), ("fail", 4), ("/compress",), ("long",), ("turn",)]
    await drive(runtime_factory, llm, pool, ops)


async def drive(runtime_factory: Any, llm: Any, pool: Any, ops: list[tuple[Any, ...]]) -> None:
    """Run `ops` on a new owner, checking every chat request, then the end state."""
    llm.reset()
    ledger = Ledger()
    llm.default_reply = "ok"
    # A small context: long messages make the token budget bind.
    rt = await runtime_factory(
        max_context=6, summary_trigger=2, default_context_limit=6000, llm_max_output_tokens=300
    )
    rt.service.locks.give_way_after = 0.05
    run = Run(rt, llm, ledger, pool)
    llm.default_for(MEMORY_MODEL, run.memory_model)
    for op in ops:
        await run.apply(op)
    await rt.service.drain()
    # The memory model is back: the next request misses nothing and declares nothing.
    llm.unscript(MEMORY_MODEL)
    run.slow_left, run.may_declare = 0, False
    await run.turn()
    await run.check()
    await rt.service.drain()  # nothing of this example answers in the next one's ledger
    # Never folded twice: along the chain of summaries that made the stored one, a user
    # message is read at most once, itself or through a squash summary (one of messages
    # some of which were folded is read as the others; a fold whose write lost to
    # another is not on it).
    conv = await rt.deps.conversations.get_or_create_conversation(run.who.owner_id)
    stored = (await rt.deps.conversations.get_conversation(conv))["summary"]
    along = ledger.folded_along(stored)
    assert max(along.values(), default=0) <= 1, along
