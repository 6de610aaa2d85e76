"""Issue 30: what the user said is in every request's working memory or in the summary it
carries, in the conditions where it used to fall out of both: a memory model slower than
the user, one that fails or refuses, long messages, a smaller /model, and MAX_CONTEXT as
seed 000 defines it. Real PostgreSQL, the real `ChatOpenAI` client against the local fake
server; each check runs on every chat request, not only the last."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from src.graph import prompts
from src.services.agent_service import Identity
from src.storage.conversation_repo import ConversationRepository
from src.storage.turn_reads import read_turn
from tests.fakes.memory_model import MEMORY_MODEL, memory_reply, section, transcript
from tests.fakes.openai_server import Fault, message_text
from tests.memory_ledger import TOKEN, Ledger

OWNERS = itertools.count(7_400_000)
CHAT = "gpt-4o-mini"


def chat_requests(llm: Any) -> list[dict[str, Any]]:
    return [
        r for r in llm.requests if message_text(r["messages"][0]).startswith(prompts.SYSTEM_PROMPT)
    ]


def missing_at_each_request(llm: Any, ledger: Ledger) -> list[tuple[int, list[str]]]:
    """Return, per chat request that lacks some, the user messages sent before or with
    it that are neither in it nor in the summary it carries."""
    out: list[tuple[int, list[str]]] = []
    sent: list[str] = []
    for i, request in enumerate(chat_requests(llm)):
        last = TOKEN.findall(message_text(request["messages"][-1]))
        for token in last:
            if token.startswith("u") and token not in sent:
                sent.append(token)
        shown = {u for m in request["messages"][1:] for u in ledger.tokens(message_text(m))}
        missing = [u for u in sent if u not in shown and u not in ledger.folded_in(request)]
        if missing:
            out.append((i, missing))
    return out


def summary_inputs(llm: Any, token: str) -> int:
    """Count the summary requests sent (answered or not) whose new messages hold `token`."""
    count = 0
    for request in llm.requests_for(MEMORY_MODEL):
        if message_text(request["messages"][0]) != prompts.SUMMARIZER_SYSTEM:
            continue
        prompt = message_text(request["messages"][-1])
        if "New messages:" in prompt:
            new = section(prompt, "New messages:\n", "\n\nRules:")
            count += any(token in TOKEN.findall(text) for _, text in transcript(new))
    return count


async def test_a_memory_model_slower_than_the_user_loses_nothing_and_is_not_resent(
    runtime_factory: Any, llm: Any
) -> None:
    """Before: each turn cancelled the previous turn's memory work after the grace, facts
    first, so the summary never ran and every cancelled call was sent again."""
    ledger = Ledger()

    async def slow(request: dict[str, Any]) -> str:
        await asyncio.sleep(0.6)
        return ledger.reply(request)

    llm.default_for(MEMORY_MODEL, slow)
    llm.default_reply = "ok"
    rt = await runtime_factory(max_context=6, summary_trigger=2, facts_every=2)
    rt.service.locks.give_way_after = 0.05
    who = Identity(next(OWNERS), "p", "P", "en")
    for i in range(1, 21):  # right after each reply, without waiting for the memory work
        assert (await rt.service.handle_message(who, f"u{i}")).ok
    await rt.service.drain()
    assert missing_at_each_request(llm, ledger) == []
    assert ledger.of_kind(prompts.SUMMARIZER_SYSTEM)  # the summary ran, not starved
    assert all(summary_inputs(llm, f"u{i}") <= 1 for i in range(1, 21))


async def test_a_failing_summary_model_keeps_the_messages_in_the_prompt(
    runtime_factory: Any, llm: Any
) -> None:
    """Before: at most SUMMARY_TRIGGER + 2 unsummarized messages stayed before the window;
    with the summary model down for 8 turns, older ones left the prompt unsummarized."""
    ledger = Ledger()
    down = {"on": False}

    def model(request: dict[str, Any]) -> Any:
        return Fault(500) if down["on"] else ledger.reply(request)

    llm.default_for(MEMORY_MODEL, model)
    llm.default_reply = "ok"
    rt = await runtime_factory(max_context=6, summary_trigger=2)
    who = Identity(next(OWNERS), "p", "P", "en")
    for i in range(1, 21):
        down["on"] = 5 <= i <= 12
        assert (await rt.service.handle_message(who, f"u{i}")).ok
        await rt.service.drain()
    assert missing_at_each_request(llm, ledger) == []
    # The backlog was folded once the model was back.
    last = chat_requests(llm)[-1]
    assert {f"u{i}" for i in range(1, 13)} <= ledger.folded_in(last)


async def test_long_messages_are_folded_before_they_leave(runtime_factory: Any, llm: Any) -> None:
    """Before: when the token budget bound, the oldest messages left the prompt one by
    one while the summary waited for SUMMARY_TRIGGER of them."""
    ledger = Ledger()
    llm.default_for(MEMORY_MODEL, ledger.reply)
    llm.default_reply = "ok"
    rt = await runtime_factory(default_context_limit=8000)
    who = Identity(next(OWNERS), "p", "P", "en")
    filler = " ".join(f"w{i}." for i in range(800))  # ~3,300 characters
    for i in range(1, 13):
        assert (await rt.service.handle_message(who, f"u{i} {filler}")).ok
        await rt.service.drain()
    assert missing_at_each_request(llm, ledger) == []
    assert ledger.folded_in(chat_requests(llm)[-1])  # the budget bound: some were folded


async def test_a_smaller_model_gets_its_own_limits(runtime_factory: Any, llm: Any) -> None:
    """Before: the summarizer planned with LLM_MODEL's budget after /model picked a
    smaller one, so that one's prompt dropped what the summary had not folded."""
    ledger = Ledger()
    llm.default_for(MEMORY_MODEL, ledger.reply)
    llm.default_reply = "ok"
    llm.default_for("small-model", "ok")
    # 5400, not 5000: the time-zone and task tools' schemas (~310 tokens) left a 5000-token
    # model a summary layer too small for the fake's summary of ten long messages.
    rt = await runtime_factory(
        model_choices={CHAT: 64000, "small-model": 5400}, model_context_limits={CHAT: 64000}
    )
    who = Identity(next(OWNERS), "p", "P", "en")
    assert await rt.service.set_model(who, "small-model")
    filler = " ".join(f"w{i}." for i in range(500))
    for i in range(1, 11):
        assert (await rt.service.handle_message(who, f"u{i} {filler}")).ok
        await rt.service.drain()
    small = [r for r in llm.requests if r["model"] == "small-model"]
    assert len(small) == 10
    assert missing_at_each_request(llm, ledger) == []


async def test_a_message_the_memory_model_refuses_is_quarantined(
    runtime_factory: Any, llm: Any
) -> None:
    """Before: a 400 for one message failed the same batch forever: no summary, no fact,
    two growing calls every turn."""
    ledger = Ledger()

    def model(request: dict[str, Any]) -> Any:
        if any("forbidden" in message_text(m) for m in request["messages"]):
            return Fault(400, {"error": {"message": "content filter", "type": "invalid"}})
        return ledger.reply(request)

    llm.default_for(MEMORY_MODEL, model)
    llm.default_reply = "ok"
    rt = await runtime_factory(max_context=6, summary_trigger=2, facts_every=2)
    who = Identity(next(OWNERS), "p", "P", "en")
    texts = [f"u{i} my item{i} is v{i}" for i in range(1, 16)]
    texts[2] = "u3 forbidden words"
    for text in texts:
        assert (await rt.service.handle_message(who, text)).ok
        await rt.service.drain()
    # Folded as a placeholder, once; the others reached the summary and the facts.
    placeholders = [
        r
        for r in ledger.of_kind(prompts.SUMMARIZER_SYSTEM)
        if "New messages:" in message_text(r["messages"][-1])
        and "[a message the memory model refused]"
        in section(message_text(r["messages"][-1]), "New messages:\n", "\n\nRules:")
    ]
    assert len(placeholders) == 1
    last = chat_requests(llm)[-1]
    assert {f"u{i}" for i in (1, 2, 4, 5, 6)} <= ledger.folded_in(last)
    keys = {f["key"] for f in await rt.deps.memory.list_facts(who.owner_id)}
    assert {"item1", "item2", "item4", "item5"} <= keys
    # The refused message is not sent again and again.
    refused = [
        r
        for r in llm.requests_for(MEMORY_MODEL)
        if any("forbidden" in message_text(m) for m in r["messages"])
    ]
    assert len(refused) <= 6, len(refused)


async def test_a_summary_over_its_budget_is_asked_again_shorter(
    runtime_factory: Any, llm: Any
) -> None:
    """Before: the stored summary was cut from its end, losing its newest part."""
    rt = await runtime_factory(max_context=2, summary_trigger=1, default_context_limit=3000)
    long = " ".join(f"Point {i} about the garden." for i in range(400))
    llm.script_for(MEMORY_MODEL, long, "The newest point: roses by the fence.")
    conv = await rt.deps.conversations.get_or_create_conversation(7_499_999)
    for i in range(4):
        await rt.deps.conversations.append_message(conv, "user", f"m{i}")
    from src.graph.memory.summarizer import summarize_due

    assert await summarize_due(rt.deps, 7_499_999, conv) == 4
    stored = (await rt.deps.conversations.get_conversation(conv))["summary"]
    assert stored == "The newest point: roses by the fence."
    again = message_text(llm.requests_for(MEMORY_MODEL)[-1]["messages"][-1])
    assert "too long" in again and "Point 0 about the garden." in again


async def test_a_long_message_reaches_summary_and_facts_whole(
    runtime_factory: Any, llm: Any
) -> None:
    """Before: messages were cut to ~2,250 tokens before the summarizer and the fact
    extractor, so what stood at the end of a long one never reached either."""
    ledger = Ledger()
    llm.default_for(MEMORY_MODEL, ledger.reply)
    llm.default_reply = "ok"
    rt = await runtime_factory(max_context=2, summary_trigger=1, facts_every=1)
    who = Identity(next(OWNERS), "p", "P", "en")
    body = " ".join(f"Line {i} of the notes." for i in range(600))  # ~13,000 characters
    assert (await rt.service.handle_message(who, f"u1 {body} Finally: my code is ZEBRA42")).ok
    await rt.service.drain()
    for i in range(2, 5):
        assert (await rt.service.handle_message(who, f"u{i}")).ok
        await rt.service.drain()
    summaries = " ".join(
        message_text(r["messages"][-1]) for r in ledger.of_kind(prompts.SUMMARIZER_SYSTEM)
    )
    assert "ZEBRA42" in summaries
    facts = {f["key"]: f["value"] for f in await rt.deps.memory.list_facts(who.owner_id)}
    assert facts.get("code") == "ZEBRA42"


async def test_after_forget_an_unanswered_message_is_in_the_next_prompt(
    runtime_factory: Any, llm: Any
) -> None:
    """Before: /forget's window counted only answered turns, so a stored message whose
    answer failed stayed invisible for turns."""
    llm.default_reply = "ok"
    rt = await runtime_factory()
    who = Identity(next(OWNERS), "p", "P", "en")
    assert (await rt.service.handle_message(who, "before")).ok
    await rt.service.forget(who)
    llm.fail_next(1, status=500)
    assert not (await rt.service.handle_message(who, "u1 the question that failed")).ok
    assert (await rt.service.handle_message(who, "u2 did you get it?")).ok
    texts = [message_text(m) for m in llm.last_request()["messages"][1:]]
    assert any("u1 the question that failed" in t for t in texts), texts
    assert not any("before" in t for t in texts)


async def test_max_context_caps_the_history_of_every_request(
    runtime_factory: Any, llm: Any
) -> None:
    """Seed 000: MAX_CONTEXT is the most history messages the model gets. Before: a full
    window carried up to SUMMARY_TRIGGER + 2 more (22 with MAX_CONTEXT=10)."""
    llm.default_for(MEMORY_MODEL, memory_reply)
    llm.default_reply = "ok"
    rt = await runtime_factory(max_context=10)
    who = Identity(next(OWNERS), "p", "P", "en")
    for i in range(1, 31):
        assert (await rt.service.handle_message(who, f"u{i}")).ok
        await rt.service.drain()
    sizes = [len(r["messages"]) - 2 for r in chat_requests(llm)]  # system, current
    assert max(sizes) == 10 and sizes[-1] == 10, sizes


async def test_the_opt_in_step_keeps_the_prefix_and_the_cap(runtime_factory: Any, llm: Any) -> None:
    """WINDOW_STEP=N: the window's start moves N messages at a time (a prompt cache reuses
    the prefix), never above MAX_CONTEXT, and nothing is lost."""
    ledger = Ledger()
    llm.default_for(MEMORY_MODEL, ledger.reply)
    llm.default_reply = "ok"
    rt = await runtime_factory(max_context=12, summary_trigger=2, window_step=4)
    who = Identity(next(OWNERS), "p", "P", "en")
    for i in range(1, 31):
        assert (await rt.service.handle_message(who, f"u{i}")).ok
        await rt.service.drain()
    requests = chat_requests(llm)
    sizes = [len(r["messages"]) - 2 for r in requests]
    assert max(sizes) <= 12 and min(sizes[10:]) >= 12 - 4 + 1, sizes
    firsts = [message_text(r["messages"][1]) for r in requests[10:]]
    assert len(set(firsts)) <= len(firsts) // 2 + 1  # the start stays for two turns
    assert missing_at_each_request(llm, ledger) == []


@pytest.mark.server
async def test_two_processes_never_fold_the_same_batch_twice(fresh_schema: str, llm: Any) -> None:
    """Folds run outside the owner's turn lock: two instances that fold the same due
    messages at once both ask the model, but only the first write stands."""
    from src.graph.memory.summarizer import summarize_due
    from src.services.factory import build_runtime
    from src.storage.pg_client import make_pool
    from tests.conftest import make_settings

    ledger = Ledger()

    async def slow(request: dict[str, Any]) -> str:
        await asyncio.sleep(0.3)
        return ledger.reply(request)

    llm.default_for(MEMORY_MODEL, slow)
    pools = [make_pool(fresh_schema, 1, 5) for _ in range(2)]
    for p in pools:
        await p.open()
    settings = make_settings(llm, max_context=6, summary_trigger=2)
    a, b = [await build_runtime(settings, pool=p) for p in pools]
    try:
        conv = await a.deps.conversations.get_or_create_conversation(7_488_888)
        for i in range(1, 11):
            await a.deps.conversations.append_message(conv, "user", f"u{i}")
        folded = await asyncio.gather(
            summarize_due(a.deps, 7_488_888, conv), summarize_due(b.deps, 7_488_888, conv)
        )
        stored = (await a.deps.conversations.get_conversation(conv))["summary"]
        along = ledger.folded_along(stored)
        assert sum(folded) == len(along) and max(along.values()) == 1, (folded, along)
        rows = await a.deps.conversations.load_last_messages(conv, 20)
        assert {r["content"] for r in rows if r["summarized"]} == set(along)
    finally:
        for rt in (a, b):
            await rt.close()
        for p in pools:
            await p.close()


async def test_a_turn_reads_the_summary_and_its_marks_from_one_snapshot(pool: Any) -> None:
    """Found by the property test under load: a turn read the running summary, then, some
    statements later in the same pipeline, the unsummarized messages. A fold committing
    in between left a message marked folded while the request carried the summary from
    before it: in neither. Here the read is held halfway (a lock on `facts`, read between
    the two) while a fold commits."""
    repo = ConversationRepository(pool)
    owner = next(OWNERS)
    conv = await repo.get_or_create_conversation(owner)
    rows = [await repo.append_message(conv, "user", f"u{i}") for i in (1, 2, 3)]
    async with pool.connection() as blocker, pool.connection() as conn:
        await blocker.execute("BEGIN")
        await blocker.execute("LOCK TABLE facts IN ACCESS EXCLUSIVE MODE")
        read = asyncio.create_task(
            read_turn(conn, owner, conv, messages=1, facts_every=1, facts=5, compacts=1, lag=9)
        )
        deadline = asyncio.get_running_loop().time() + 10
        while not await waits_for_facts(blocker):
            assert asyncio.get_running_loop().time() < deadline, "the read never reached facts"
            await asyncio.sleep(0.01)
        assert await repo.fold_summary(conv, "", "user: u1", [rows[0]["id"]])
        await blocker.execute("COMMIT")  # the lock goes: the read goes on
        reads = await read
    assert reads.conversation is not None
    shown = {r["content"] for r in [*reads.unsummarized, *reads.messages]}
    assert "u1" in reads.conversation["summary"] or "u1" in shown, (reads.conversation, shown)


async def waits_for_facts(conn: Any) -> bool:
    """Say whether some session waits for a lock on the `facts` table."""
    cur = await conn.execute(
        "SELECT count(*) AS n FROM pg_locks WHERE NOT granted AND relation = 'facts'::regclass"
    )
    row = await cur.fetchone()
    return bool(row and row["n"])
