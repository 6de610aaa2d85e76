"""Issue 40: a person's /erase (in their private chat) reaches every group they wrote in.
Their lines in a group's texts kept for facts go, their group messages not extracted yet
never teach a fact about them, and their facts leave the group's checkpoints, as their
own /memory forget there takes them out. Real PostgreSQL, the real `ChatOpenAI` client
against the local fake server.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from src.services.agent_service import Identity
from src.services.factory import Runtime
from src.storage.checkpoint_redaction import REDACTED
from tests.db_scan import in_checkpoints
from tests.fakes.memory_model import MEMORY_MODEL, memory_reply
from tests.fakes.openai_server import Fault, message_text
from tests.integration.test_memory_erasure import rows

GROUP, ANN, BOB = -100_970_000, 9701, 9702
ANNS = ("zqxann-lisbon", "zqxann-nurse")  # what Ann says of herself in the group


def member(who: int) -> Identity:
    """The group, its message written by `who`."""
    return Identity(GROUP, "g", "G", "en", sender_id=who, member_id=who)


async def member_facts(pool: Any) -> set[tuple[int, str, str]]:
    query = "SELECT member_id, key, value FROM facts WHERE telegram_user_id = %s"
    return {(r["member_id"], r["key"], r["value"]) for r in await rows(pool, query, GROUP)}


def holding(requests: list[dict[str, Any]], marks: tuple[str, ...]) -> list[str]:
    """Return the texts of the requests that hold any of `marks`."""
    texts = [" ".join(message_text(m) for m in r["messages"]) for r in requests]
    return [text for text in texts if any(mark in text for mark in marks)]


async def say(rt: Runtime, who: int, text: str) -> None:
    assert (await rt.service.handle_message(member(who), text)).ok
    await rt.service.drain()


async def test_a_persons_erase_is_not_undone_by_the_groups_next_extraction(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """Ann's lines in the group's text kept at /new (the memory model down) and her
    message not extracted yet: after her /erase in private, neither teaches a fact about
    her when the group's extraction runs again, and the memory model never reads them
    again; Bob's facts from the same texts are learned. Before: her facts came back."""
    llm.default_reply = "ok"
    rt = await runtime_factory(facts_every=1, summary_trigger=1000)
    assert rt.service.compactor is not None
    rt.service.compactor.wait_seconds = 0.5
    llm.default_for(MEMORY_MODEL, lambda request: Fault(503))
    await say(rt, ANN, f"my city is {ANNS[0]}")
    await say(rt, BOB, "my city is Oslo")
    await rt.service.new_conversation(Identity(GROUP))  # kept: the model is down
    kept = await rows(pool, "SELECT text FROM pending_facts WHERE telegram_user_id = %s", GROUP)
    assert any(ANNS[0] in r["text"] for r in kept)
    await say(rt, ANN, f"my job is {ANNS[1]}")  # waits for extraction
    assert await member_facts(pool) == set()

    await rt.service.erase(Identity(ANN))
    seen = len(llm.requests_for(MEMORY_MODEL))
    llm.default_for(MEMORY_MODEL, memory_reply)
    await say(rt, BOB, "my job is pilot")
    later = rt.deps.clock() + timedelta(days=1)
    assert await rt.service.compactor.pending.retry_due(now=later) >= 1
    await rt.service.drain()

    assert await member_facts(pool) == {(BOB, "job", "pilot"), (BOB, "city", "Oslo")}
    assert holding(llm.requests_for(MEMORY_MODEL)[seen:], ANNS) == []
    kept = await rows(pool, "SELECT text FROM pending_facts")
    assert not any(mark in r["text"] for r in kept for mark in ANNS)


async def test_a_persons_erase_takes_their_facts_out_of_the_groups_checkpoints(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """Ann's fact is in a group turn's prompt, so in the group thread's checkpoints;
    after her /erase in private none holds it (as after her /memory forget there), the
    records still read, and Bob's fact stays. Before: `runs show` still showed it."""
    llm.default_reply = "ok"
    rt = await runtime_factory(facts_every=1, summary_trigger=1000)
    await say(rt, ANN, "my diagnosis is flu")
    await say(rt, BOB, "my diagnosis is gout")
    await say(rt, ANN, "what do you know about me?")
    await say(rt, BOB, "and about me?")
    assert await in_checkpoints(pool, "diagnosis: flu")
    assert await in_checkpoints(pool, "diagnosis: gout")

    await rt.service.erase(Identity(ANN))

    assert await in_checkpoints(pool, "diagnosis: flu") == []
    assert await in_checkpoints(pool, "diagnosis: gout")
    assert await member_facts(pool) == {(BOB, "diagnosis", "gout")}
    conversation = await rt.deps.conversations.get_or_create_conversation(GROUP)
    config = {"configurable": {"thread_id": str(conversation)}}
    seen = [repr(tup) async for tup in rt.checkpointer.alist(config)]
    assert seen and not any("diagnosis: flu" in s for s in seen)
    assert any(REDACTED in s for s in seen)
    await say(rt, BOB, "anything new?")
