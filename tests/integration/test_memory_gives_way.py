"""Issues 16 and 30: the memory work after a reply (summary, facts) never holds up the owner.

The summary model hangs (60 s) on the first summary or fact-extraction request; the
owner's next message, `/new`, `/forget` and `/compress` each finish well within 10 s
anyway, because that work gives way: the turn stops waiting for it (after a grace of a
second) and it goes on in the background, not cancelled and sent again (issue 30). When
the hung call finally fails, it has marked nothing, and a later turn redoes it. Afterwards
every message is in the window or was folded into the summary exactly once, and facts
were extracted from each at most once. Real PostgreSQL, the real `ChatOpenAI` client.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter
from typing import Any

import pytest

from src.graph import prompts
from src.services.agent_service import Identity
from tests.fakes.memory_model import MEMORY_MODEL, section, transcript
from tests.fakes.openai_server import Fault, message_text
from tests.memory_ledger import TOKEN, Ledger

OWNERS = itertools.count(7_300_000)
HANG = 60.0
BOUND = 10.0  # "promptly": far below the hang, far above a turn on a busy machine


class HangFirst:
    """The memory model: hangs on the first request with `system`, answers the rest."""

    def __init__(self, ledger: Ledger, system: str) -> None:
        self.ledger, self.system = ledger, system
        self.hung: list[dict[str, Any]] = []
        self.release = threading.Event()

    async def __call__(self, request: dict[str, Any]) -> Any:
        # Runs on the fake server's own loop and thread.
        if message_text(request["messages"][0]) == self.system and not self.hung:
            self.hung.append(request)
            deadline = time.monotonic() + HANG
            while not self.release.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return Fault(503)  # never answered: it folded nothing
        return self.ledger.reply(request)


def facts_extracted(ledger: Ledger) -> Counter[str]:
    """Count, per user message, the answered fact-extraction requests that carried it."""
    counts: Counter[str] = Counter()
    for request in ledger.of_kind(prompts.FACTS_SYSTEM):
        prompt = message_text(request["messages"][-1])
        for role, text in transcript(section(prompt, "Messages:\n", "\n\nAnswer with")):
            if role == "user":
                counts.update(TOKEN.findall(text))
    return counts


@pytest.mark.parametrize("op", ["message", "/new", "/forget", "/compress"])
@pytest.mark.parametrize(
    "hung", [prompts.SUMMARIZER_SYSTEM, prompts.FACTS_SYSTEM], ids=["summary", "facts"]
)
async def test_a_hanging_memory_model_holds_up_nothing(
    runtime_factory: Any, llm: Any, pool: Any, hung: str, op: str
) -> None:
    ledger = Ledger()
    hang = HangFirst(ledger, hung)
    llm.default_for(MEMORY_MODEL, hang)
    llm.default_reply = "ok"
    rt = await runtime_factory(max_context=4, summary_trigger=2, facts_every=2, llm_timeout=HANG)
    service, who = rt.service, Identity(next(OWNERS), "p", "P", "en")
    n, current, conversations = 0, [], set()

    async def turn() -> None:
        nonlocal n
        n += 1
        result = await asyncio.wait_for(service.handle_message(who, f"u{n}"), BOUND)
        assert result.ok
        current.append(f"u{n}")
        conversations.add(await rt.deps.conversations.get_or_create_conversation(who.owner_id))

    drained = None
    try:
        # Turns until the memory work after a reply hangs in the model.
        for _ in range(8):
            await turn()
            drained = asyncio.ensure_future(service.drain())
            while not drained.done() and not hang.hung:
                await asyncio.sleep(0.02)
            if hang.hung:
                break
        assert hang.hung, "the memory model was never asked"
        forgotten: set[str] = set()
        if op == "message":
            await turn()
        elif op == "/new":
            await asyncio.wait_for(service.new_conversation(who), BOUND)
            current = []
        elif op == "/forget":
            await asyncio.wait_for(service.forget(who), BOUND)
            forgotten = set(current)
        else:
            args = {"from": 1, "to": 2, "summary": "S1"}
            llm.script({"tool_calls": [{"name": "compress_range", "args": args}]}, "done")
            result = await asyncio.wait_for(service.compress(who), BOUND)
            assert result.ok and result.compressions == 1
        # The hung work was not waited for; it is still running (nobody cancelled it and
        # asked again) until the model fails it.
        assert len(hang.hung) == 1
        hang.release.set()
        await asyncio.wait_for(drained, BOUND)
        for _ in range(4):
            await turn()
            await asyncio.wait_for(service.drain(), BOUND)
        before = len(ledger.answered)
        await turn()
        await asyncio.wait_for(service.drain(), BOUND)
    finally:
        hang.release.set()
    # The window is what the last request carried; the summaries are those made before it.
    window_request = [r for r in llm.requests if r["model"] == rt.settings.llm_model][-1]
    await ledger.learn_squashes(pool, list(conversations))
    in_window = {
        u for m in window_request["messages"][1:] for u in ledger.tokens(str(m.get("content")))
    }
    counts = ledger.summarized(before)
    assert max(counts.values(), default=0) <= 1, counts
    for token in current:
        if token not in forgotten:
            assert counts[token] == 1 or token in in_window, (token, counts)
    assert max(facts_extracted(ledger).values(), default=0) <= 1, facts_extracted(ledger)


async def test_memory_work_gives_way_to_a_message_already_waiting(
    runtime_factory: Any, llm: Any
) -> None:
    # Messages sent at once: each turn's memory work starts while the next already waits,
    # and gives way to it (here the one that hangs).
    ledger = Ledger()
    hang = HangFirst(ledger, prompts.SUMMARIZER_SYSTEM)
    llm.default_for(MEMORY_MODEL, hang)
    llm.default_reply = "ok"
    rt = await runtime_factory(max_context=2, summary_trigger=1, llm_timeout=HANG)
    who = Identity(next(OWNERS), "p", "P", "en")
    try:
        for burst in range(3):
            results = await asyncio.wait_for(
                asyncio.gather(*(rt.service.handle_message(who, f"u{burst}{i}") for i in range(3))),
                BOUND,
            )
            assert all(r.ok for r in results)
        # Unless a turn in a burst hit it, the last turn's memory work hangs (nobody to
        # give way to) until the next message.
        for _ in range(int(BOUND / 0.02)):
            if hang.hung:
                break
            await asyncio.sleep(0.02)
        assert hang.hung
        assert (await asyncio.wait_for(rt.service.handle_message(who, "u9"), BOUND)).ok
        hang.release.set()  # the hung call goes on after the turns; now it fails
        await asyncio.wait_for(rt.service.drain(), BOUND)
        # The next turn folds what the failed call could not.
        assert (await asyncio.wait_for(rt.service.handle_message(who, "u99"), BOUND)).ok
        await asyncio.wait_for(rt.service.drain(), BOUND)
        assert len(hang.hung) == 1 and ledger.of_kind(prompts.SUMMARIZER_SYSTEM)
        assert max(ledger.summarized().values(), default=0) <= 1
    finally:
        hang.release.set()
