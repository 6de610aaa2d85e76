"""Issue 40: the running summary holds what it says it holds. A refusal is a refusal however
the memory model says it, and a fold that does not fit is never stored cut. Real
PostgreSQL, the real `ChatOpenAI` client against the local fake server; the issue-30
invariant (every message in the prompt or folded into the summary it carries) is checked
on every chat request."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from src.graph import prompts
from src.services.agent_service import Identity
from tests.fakes.memory_model import MEMORY_MODEL, section
from tests.fakes.openai_server import message_text
from tests.integration.test_memory_every_request import chat_requests, missing_at_each_request
from tests.memory_ledger import REFUSED, REFUSED_PLACEHOLDER, Ledger, summary_of

OWNERS = itertools.count(7_600_000)


def missing_but_refused(llm: Any, ledger: Ledger, refused: str) -> list[tuple[int, list[str]]]:
    """Return `missing_at_each_request`, the `refused` message not counted where the
    summary the request carries folded its placeholder (which stands for it)."""
    requests = chat_requests(llm)
    out = []
    for i, missing in missing_at_each_request(llm, ledger):
        if REFUSED in ledger.covered(summary_of(requests[i])):
            missing = [u for u in missing if u != refused]
        if missing:
            out.append((i, missing))
    return out


def placeholder_folds(ledger: Ledger) -> int:
    """Count the answered summary requests that fold the refused message's placeholder."""
    return sum(
        REFUSED_PLACEHOLDER
        in section(message_text(r["messages"][-1]), "New messages:\n", "\n\nRules:")
        for r in ledger.of_kind(prompts.SUMMARIZER_SYSTEM)
        if "New messages:" in message_text(r["messages"][-1])
    )


REFUSALS = {
    "filtered-empty": {"content": "", "finish_reason": "content_filter"},
    "filtered-partial": {"content": "Summary so far: u1 said", "finish_reason": "content_filter"},
    "refusal-field": {"content": None, "refusal": "I'm sorry, I can't help with that."},
}


@pytest.mark.parametrize("mode", ["json_schema", "text"])
@pytest.mark.parametrize("refusal", list(REFUSALS))
async def test_a_refusal_answered_200_is_a_refusal(
    runtime_factory: Any, llm: Any, refusal: str, mode: str
) -> None:
    """Azure's output filter answers 200 with `finish_reason: "content_filter"`; OpenAI's
    Structured Outputs answer a refusal in `refusal`. Before: an empty answer stalled the
    summary for good (and then requests dropped messages), a partial one was stored as the
    summary and lost the batch, and the facts of the refused message's batch were lost
    (the batch marked without them). Now each is handled as a 400 is: the refused message
    is folded as a placeholder, once; the others reach summary and facts."""
    ledger = Ledger()

    def model(request: dict[str, Any]) -> Any:
        if any("forbidden" in message_text(m) for m in request["messages"]):
            return REFUSALS[refusal]
        return ledger.reply(request)

    llm.default_for(MEMORY_MODEL, model)
    llm.default_reply = "ok"
    llm.structured_output_mode = mode  # "text": JSON asked in plain text, as llama.cpp's
    rt = await runtime_factory(max_context=6, summary_trigger=2, facts_every=2)
    who = Identity(next(OWNERS), "p", "P", "en")
    texts = [f"u{i} my item{i} is v{i}" for i in range(1, 16)]
    texts[2] = "u3 forbidden words"
    for text in texts:
        assert (await rt.service.handle_message(who, text)).ok
        await rt.service.drain()
    assert missing_but_refused(llm, ledger, "u3") == []
    assert placeholder_folds(ledger) == 1
    last = chat_requests(llm)[-1]
    assert {f"u{i}" for i in (1, 2, 4, 5, 6)} <= ledger.folded_in(last)
    keys = {f["key"] for f in await rt.deps.memory.list_facts(who.owner_id)}
    assert {f"item{i}" for i in (1, 2, 4, 5, 6, 7, 8)} <= keys, keys
    refused = [
        r
        for r in llm.requests_for(MEMORY_MODEL)
        if any("forbidden" in message_text(m) for m in r["messages"])
    ]
    assert len(refused) <= 6, len(refused)


async def test_a_filtered_compact_is_the_sessions_own_text(runtime_factory: Any, llm: Any) -> None:
    """Before: asked in plain text, a compact stopped by a content filter was stored as the
    session's note: the filter's fragment. Now it is a refusal: the plain-text compact is
    built from the session's own messages."""
    llm.structured_output_mode = "text"
    llm.default_reply = "ok"
    llm.script_for("compact-model", REFUSALS["filtered-partial"])
    rt = await runtime_factory(compact_model="compact-model")
    who = Identity(next(OWNERS), "p", "P", "en")
    for text in ("u1 planning the garden fence", "u2 roses by the gate"):
        assert (await rt.service.handle_message(who, text)).ok
    await rt.service.drain()
    await rt.service.new_conversation(who)
    (compact,) = await rt.deps.memory.list_compacts(who.owner_id)
    assert "u1 planning the garden fence" in compact["summary"], compact
    assert "u2 roses by the gate" in compact["summary"], compact
