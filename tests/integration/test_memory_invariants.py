"""Property (issue 12): every stored user message reaches the summarizer exactly once, or
is still in the working window, whatever happens in between: turns, squashes by the model
(`compress_last`, `compress_range`) and by the user (`/compress`), `/forget`, `/new`, and
a summary model that fails for a while. Real PostgreSQL, the real `ChatOpenAI` client."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from src.services.agent_service import Identity
from tests.fakes.memory_model import MEMORY_MODEL
from tests.fakes.openai_server import Fault
from tests.memory_ledger import TOKEN, Ledger

OWNERS = itertools.count(7_100_000)
SQUASHES = itertools.count(1)

OPS = st.one_of(
    st.tuples(st.just("turn")),
    st.tuples(st.just("compress_last"), st.integers(1, 4)),
    st.tuples(st.just("compress_range"), st.integers(1, 5), st.integers(0, 3)),
    st.tuples(st.just("/compress")),
    st.tuples(st.just("/forget")),
    st.tuples(st.just("/new")),
    st.tuples(st.just("fail"), st.integers(1, 4)),
)
# Mostly turns: the window must fill and overflow for the summarizer to have work.
SEQUENCES = st.lists(st.one_of(st.tuples(st.just("turn")), OPS), min_size=5, max_size=40)


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args}]}


class Run:
    """One owner's conversation driven through the service, with the bookkeeping."""

    def __init__(self, rt: Any, llm: Any) -> None:
        self.rt, self.llm = rt, llm
        self.who = Identity(next(OWNERS), "p", "P", "en")
        self.n = 0
        self.current: list[str] = []  # user-message tokens of the current conversation
        self.forgotten: set[str] = set()
        self.conversations: set[Any] = set()

    async def turn(self) -> None:
        self.n += 1
        token = f"u{self.n}"
        await self.rt.service.handle_message(self.who, token)
        self.current.append(token)
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
        else:
            await self.turn()
        await self.rt.service.drain()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=SEQUENCES)
async def test_every_message_reaches_the_summary_once_or_stays_in_the_window(
    runtime_factory: Any, llm: Any, pool: Any, ops: list[tuple[Any, ...]]
) -> None:
    llm.reset()
    ledger = Ledger()
    llm.default_for(MEMORY_MODEL, ledger.reply)
    llm.default_reply = "ok"
    rt = await runtime_factory(max_context=6, summary_trigger=2)
    run = Run(rt, llm)
    for op in ops:
        await run.apply(op)
    # The summary model recovers; a few more turns let the summary catch up.
    llm.unscript(MEMORY_MODEL)
    for _ in range(3):
        await run.turn()
        await rt.service.drain()
    # The window is what the next request carries; the summaries are those made before
    # it (that turn's own summarizer runs after its reply).
    before = len(ledger.answered)
    await run.turn()
    await rt.service.drain()
    window_request = [r for r in llm.requests if r["model"] == rt.settings.llm_model][-1]
    await ledger.learn_squashes(pool, list(run.conversations))
    in_window = {
        u
        for m in window_request["messages"][1:]
        for u in ledger.tokens(str(m.get("content") or ""))
    }
    counts = ledger.summarized(before)
    assert max(counts.values(), default=0) <= 1, counts  # never twice, in any conversation
    for token in run.current:
        if token in run.forgotten:
            continue  # /forget put it out of the summary's reach (at most once before)
        assert (counts[token], token in in_window) in ((1, False), (0, True)), (
            token,
            counts[token],
            sorted(in_window, key=lambda u: int(u[1:])),
            ops,
        )
    assert all(TOKEN.fullmatch(u) for u in in_window)
