"""One turn through AgentService, the graph, real Postgres and the local model server."""

from __future__ import annotations

import asyncio
import functools
import re
from typing import Any

from src.services.agent_service import Identity

ALICE = Identity(101, "alice", "Alice", "ru")
STAMP = re.compile(r"^\[Текущее время: \d{4}-\d\d-\d\d \d\d:\d\d\] ")


def _user_texts(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


async def test_turn_stores_both_messages_and_replies(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.script("Привет! Чем помочь?")
    result = await rt.service.handle_message(ALICE, "Привет")
    assert result.ok and result.reply == "Привет! Чем помочь?"
    request = llm.last_request()
    assert request["messages"][0]["role"] == "system"
    users = _user_texts(request)
    assert len(users) == 1 and users[0].startswith("[1] User: [Текущее время: ")
    conv = await rt.deps.conversations.get_or_create_conversation(ALICE.owner_id)
    rows = await rt.deps.conversations.load_last_messages(conv)
    assert [r["role"] for r in rows] == ["user", "assistant"]
    assert STAMP.match(rows[0]["content"]) and rows[0]["content"].endswith("] Привет")
    assert rows[1]["content"] == "Привет! Чем помочь?"


async def test_history_window_last_30_in_order(runtime_factory: Any, llm: Any) -> None:
    # MAX_CONTEXT=30: the summary folds messages before they leave, so the request
    # carries exactly the last 30 stored messages, then the current one.
    rt = await runtime_factory()
    for i in range(40):
        await rt.service.handle_message(ALICE, f"msg {i}")
    await rt.service.drain()
    await rt.service.handle_message(ALICE, "last")
    body = llm.last_request()["messages"][1:]
    assert len(body) == 31  # 30 stored messages + the current one
    contents = [m["content"] for m in body]
    assert contents[0].startswith("[1] User: [") and contents[0].endswith("msg 25")
    assert contents[-1].startswith("[31] User: [") and contents[-1].endswith("last")
    assert sum("last" in c for c in contents) == 1


async def test_a_message_leaves_the_window_only_once_summarized(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """Every request carries the last min(stored, 30) messages (seed 000: never more while
    the summary keeps up), and each message older than those is in the summary already."""
    rt = await runtime_factory()  # MAX_CONTEXT=30, SUMMARY_TRIGGER=10
    conv = await rt.deps.conversations.get_or_create_conversation(ALICE.owner_id)
    for i in range(30):
        before = await rt.deps.conversations.load_last_messages(conv, 200)
        await rt.service.handle_message(ALICE, f"msg {i}")
        await rt.service.drain()
        body = llm.requests_for("gpt-4o-mini")[-1]["messages"][1:-1]
        assert len(body) == min(len(before), 30)
        shown = [m["content"].split(": ", 1)[1] for m in body]
        assert shown == [r["content"] for r in before[-30:]][-len(shown) :] if shown else True
        left = before[: len(before) - len(body)]
        assert all(r["summarized"] for r in left), [r["number"] for r in left]
    summary = (await rt.deps.conversations.get_conversation(conv))["summary"]
    assert summary  # the first messages left, folded


async def test_model_failure_keeps_message_and_next_turn_works(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory()
    llm.fail_next(1, status=500)  # max_retries=0 in tests
    result = await rt.service.handle_message(ALICE, "сохрани меня")
    assert not result.ok and "сохранено" in result.reply
    llm.script("ok now")
    result = await rt.service.handle_message(ALICE, "again")
    assert result.ok and result.reply == "ok now"
    conv = await rt.deps.conversations.get_or_create_conversation(ALICE.owner_id)
    rows = await rt.deps.conversations.load_last_messages(conv)
    assert [r["content"].split("] ", 1)[1] for r in rows if r["role"] == "user"] == [
        "сохрани меня",
        "again",
    ]
    assert "сохрани меня" in " ".join(_user_texts(llm.last_request()))


async def test_tools_used_logged(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    await rt.service.handle_message(ALICE, "my cat is called Barsik")
    llm.script(
        {"tool_calls": [{"name": "search_history", "args": {"query": "Barsik"}}]},
        "Your cat is Barsik.",
    )
    result = await rt.service.handle_message(ALICE, "what is my cat called?")
    assert result.reply == "Your cat is Barsik." and result.tools_used == ["search_history"]
    tool_msg = [m for m in llm.last_request()["messages"] if m["role"] == "tool"]
    assert "Barsik" in tool_msg[0]["content"]
    conv = await rt.deps.conversations.get_or_create_conversation(ALICE.owner_id)
    rows = await rt.deps.conversations.load_last_messages(conv)
    assert [r["role"] for r in rows[2:]] == ["user", "assistant", "tool", "system", "assistant"]
    assert rows[-2]["content"] == "Tools used: search_history"
    user = await rt.deps.users.get(ALICE.owner_id)
    assert user["active_messages_count"] is None


FAIL_REPLY_INSERT = """
CREATE FUNCTION refuse_reply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'disk full (test)';
END $$;
CREATE TRIGGER refuse_reply BEFORE INSERT ON messages FOR EACH ROW
    WHEN (NEW.role = 'assistant' AND NEW.meta IS NULL) EXECUTE FUNCTION refuse_reply();
"""


async def test_turn_writes_commit_together_and_reply_is_sent_when_storing_fails(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory()
    async with rt.pool.connection() as conn:
        await conn.execute(FAIL_REPLY_INSERT.encode(), prepare=False)
    llm.script(
        {"tool_calls": [{"name": "search_history", "args": {"query": "cats"}}]},
        "Nothing about cats yet.",
    )
    result = await rt.service.handle_message(ALICE, "what did I say about cats?")
    assert result.reply == "Nothing about cats yet."
    assert result.tools_used == ["search_history"]
    await rt.service.drain()
    conv = await rt.deps.conversations.get_or_create_conversation(ALICE.owner_id)
    rows = await rt.deps.conversations.load_last_messages(conv)
    # No tool records and no "Tools used" note without the reply they led to.
    assert [r["role"] for r in rows] == ["user"]
    user = await rt.deps.users.get(ALICE.owner_id)
    assert user is not None and user["active_messages_count"] is None


async def test_the_reply_leaves_once_stored_not_after_the_steps_bookkeeping(
    runtime_factory: Any, llm: Any, monkeypatch: Any
) -> None:
    """The caller has the reply as soon as save_response has stored it: what the step
    does after (here held until the caller has its reply) does not hold it back."""
    from src.graph.nodes import Nodes

    release = asyncio.Event()
    original = Nodes.save_response

    @functools.wraps(original)
    async def held(self: Nodes, state: Any, config: Any) -> Any:
        update = await original(self, state, config)
        await release.wait()
        return update

    monkeypatch.setattr(Nodes, "save_response", held)
    rt = await runtime_factory()
    llm.script("Ready")
    try:
        result = await asyncio.wait_for(rt.service.handle_message(ALICE, "Hi"), timeout=10)
    finally:
        release.set()
    assert result.ok and result.reply == "Ready"
    await rt.service.drain()
    conv = await rt.deps.conversations.get_or_create_conversation(ALICE.owner_id)
    rows = await rt.deps.conversations.load_last_messages(conv)
    assert [r["content"] for r in rows][-1] == "Ready"


async def test_a_turn_asks_the_database_little_before_its_reply(
    runtime_factory: Any, llm: Any, monkeypatch: Any
) -> None:
    """Before the model call, one round trip each: the lease with the owner's row, their
    conversation and its thread's last checkpoint id, the user's message, the memory the
    context is built from. Storing the reply is one more: the messages,
    the counter and the commit in one pipeline. (The bench reports these per turn.)"""
    from bench.harness import DbCounter
    from src.graph.nodes import Nodes

    counter = DbCounter()
    seen: dict[str, int] = {}
    original = Nodes.save_response

    def exchanges() -> int:
        # Not the statements' first preparation on a connection: the pool's connections
        # take turns, and which of them has prepared what varies.
        return counter.counts["round_trips"] - counter.counts["prepares"]

    @functools.wraps(original)
    async def counted(self: Nodes, state: Any, config: Any) -> Any:
        before = exchanges()
        try:
            return await original(self, state, config)
        finally:
            seen["reply"] = exchanges() - before

    def answer(body: dict[str, Any]) -> str:
        seen["model call"] = exchanges()
        return "Hello again"

    monkeypatch.setattr(Nodes, "save_response", counted)
    rt = await runtime_factory()
    llm.script("Hello")
    await rt.service.handle_message(ALICE, "Hi")  # creates the owner and the conversation
    await rt.service.drain()
    if rt.embeddings is not None:
        await rt.embeddings.drain()
    llm.script(answer)
    with counter.installed():
        result = await rt.service.handle_message(ALICE, "How are you?")
        await rt.service.drain()
    assert result.ok and result.reply == "Hello again"
    # At most: a pipeline's answer may be read while it sends, and is then not counted.
    assert 1 <= seen["model call"] <= 3 and seen["reply"] <= 1
