"""The turn's checkpointer: writes deferred to after the reply, and never a WAL flush."""

from __future__ import annotations

import asyncio
import secrets
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.types import ERROR
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from bench.harness import DbCounter
from src.devtools.checkpoints import CheckpointReader
from src.services.agent_service import Identity
from src.storage.checkpoint_rows import INLINE_TEXT, PACKED, _inline
from src.storage.checkpointer import PooledPostgresSaver
from src.storage.pg_client import make_pool
from tests.fakes.openai_server import FakeOpenAI

Pool = AsyncConnectionPool[Any]
CAROL = Identity(8101, "carol", "Carol", "en")


async def stored(pool: Pool, thread: str) -> tuple[int, int]:
    """Return the thread's stored checkpoints and task writes."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %s) AS c,"
            " (SELECT count(*) FROM checkpoint_writes WHERE thread_id = %s) AS w",
            (thread, thread),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row["c"]), int(row["w"])


def config(thread: str, checkpoint_id: str = "") -> dict[str, Any]:
    return {
        "configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
    }


async def put(saver: PooledPostgresSaver, thread: str) -> dict[str, Any]:
    """Store one checkpoint and one task write for it; return its config."""
    checkpoint = empty_checkpoint()
    saved = await saver.aput(config(thread), checkpoint, {"source": "loop", "step": 0}, {})
    await saver.aput_writes(saved, [("reply", "hi")], task_id="task-1")
    return dict(saved)


@pytest.fixture
async def saver(pool: Pool) -> PooledPostgresSaver:
    saver = PooledPostgresSaver(pool)
    await saver.setup()
    return saver


async def test_deferred_writes_are_stored_by_flush_and_at_the_end(
    saver: PooledPostgresSaver, pool: Pool
) -> None:
    async with saver.deferred("t1"):
        await put(saver, "t1")
        assert await stored(pool, "t1") == (0, 0)  # held in memory
        await put(saver, "other")  # another thread is not deferred
        assert await stored(pool, "other") == (1, 1)
        await saver.flush("t1")
        assert await stored(pool, "t1") == (1, 1)
        last = await put(saver, "t1")
        assert await stored(pool, "t1") == (1, 1)
        # Reading the thread stores what is held first: the newest checkpoint is found.
        found = await saver.aget_tuple(config("t1"))
        assert found is not None
        assert (
            found.config["configurable"]["checkpoint_id"] == last["configurable"]["checkpoint_id"]
        )
        await put(saver, "t1")
    assert await stored(pool, "t1") == (3, 3)
    # After the turn, writes go straight to the database again.
    await put(saver, "t1")
    assert await stored(pool, "t1") == (4, 4)


async def test_a_failed_flush_loses_checkpoints_only(
    saver: PooledPostgresSaver, pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise PoolTimeout("no connection")

    async with saver.deferred("t2"):
        await put(saver, "t2")
        monkeypatch.setattr(saver.pool, "connection", unavailable)
    assert saver.lost_writes == 2  # the checkpoint (it has no blobs) and the task write
    monkeypatch.undo()
    assert await stored(pool, "t2") == (0, 0)


async def test_a_turn_stores_its_checkpoints_without_waiting_for_a_flush(
    runtime_factory: Any, llm: FakeOpenAI, pool: Pool
) -> None:
    rt = await runtime_factory()
    llm.script("Hi", "Hello Carol")
    await rt.service.handle_message(CAROL, "Hello")  # creates the user and conversation
    await rt.service.drain()
    counter = DbCounter()
    with counter.installed():
        result = await rt.service.handle_message(CAROL, "Hi")
        await rt.service.drain()
    assert result.ok and result.reply == "Hello Carol"
    counts = counter.counts
    # Every checkpoint write committed with synchronous_commit off.
    assert counts["saver_commits"] == 0 and counts["saver_async_commits"] >= 1
    # Only the user's message and the reply waited for their WAL flush.
    assert counts["commits"] == 2
    thread = str(await rt.deps.conversations.get_or_create_conversation(CAROL.owner_id))
    checkpoints, writes = await stored(pool, thread)
    assert checkpoints >= 8 and writes >= 8  # both turns'


async def test_a_flush_cancelled_midway_still_stores(
    saver: PooledPostgresSaver, pool: Pool
) -> None:
    """The owner's next turn cancels this turn's work after the reply: what a flush took
    is written all the same."""
    async with saver.deferred("t3"):
        await put(saver, "t3")
        flush = asyncio.ensure_future(saver.flush("t3"))
        await asyncio.sleep(0)  # it has taken the statements and waits for a connection
        flush.cancel()
        with pytest.raises(asyncio.CancelledError):
            await flush
        for _ in range(100):
            if await stored(pool, "t3") == (1, 1):
                break
            await asyncio.sleep(0.02)
        assert await stored(pool, "t3") == (1, 1)


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def counting_graph(saver: Any) -> Any:
    """A graph whose state keeps every message: `add` appends one."""

    def add(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage(f"reply {len(state['messages'])}")]}

    builder = StateGraph(State)
    builder.add_node("add", add)
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder.compile(checkpointer=saver)


async def blob_types(pool: Pool, thread: str) -> dict[str, set[str]]:
    """Return the stored type tags of the thread's messages channel and task writes (the
    message is one of a task's writes, packed with the others when short)."""
    async with pool.connection() as conn:
        blobs = await conn.execute(
            "SELECT type FROM checkpoint_blobs WHERE thread_id = %s AND channel = 'messages'",
            (thread,),
        )
        writes = await conn.execute(
            "SELECT type FROM checkpoint_writes WHERE thread_id = %s AND channel = ANY(%s)",
            (thread, ["messages", PACKED]),
        )
        return {
            "blobs": {r["type"] for r in await blobs.fetchall()},
            "writes": {r["type"] for r in await writes.fetchall()},
        }


async def test_long_values_are_stored_compressed_and_read_back(
    saver: PooledPostgresSaver, pool: Pool
) -> None:
    graph = counting_graph(saver)
    cfg = {"configurable": {"thread_id": "z1"}}
    long = "Расскажи подробно про сорта чая и как их заваривать. " * 40
    await graph.ainvoke({"messages": [("user", "hi")]}, cfg)
    await graph.ainvoke({"messages": [("user", long)]}, cfg)
    types = await blob_types(pool, "z1")
    # Short values stay as they are; the long message is compressed wherever it is kept.
    assert "msgpack+raw" in types["writes"] and "msgpack+zlib" in types["writes"]
    assert "msgpack+zlib" in types["blobs"]
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT max(length(blob)) AS n FROM checkpoint_writes WHERE thread_id = 'z1'"
        )
        row = await cur.fetchone()
    assert row is not None and row["n"] < len(long.encode()) / 4
    state = await graph.aget_state(cfg)
    assert [m.content for m in state.values["messages"]] == ["hi", "reply 1", long, "reply 3"]
    # The developer tools read them with the same serializer.
    found = await CheckpointReader(pool).saver.aget_tuple(cfg)
    assert found is not None
    assert found.checkpoint["channel_values"]["messages"][2].content == long


async def test_a_thread_written_before_goes_on(pool: Pool, saver: PooledPostgresSaver) -> None:
    """Checkpoints of the stock saver (plain values, 51-character versions) are read, and
    the thread goes on with short versions that sort after them."""
    cfg = {"configurable": {"thread_id": "z2"}}
    await counting_graph(AsyncPostgresSaver(pool)).ainvoke({"messages": [("user", "one")]}, cfg)
    before = await counting_graph(saver).aget_state(cfg)
    old = before.values and dict(before.config)
    assert old and [m.content for m in before.values["messages"]] == ["one", "reply 1"]
    graph = counting_graph(saver)
    await graph.ainvoke({"messages": [("user", "two")]}, cfg)
    await graph.ainvoke({"messages": [("user", "three")]}, cfg)
    state = await graph.aget_state(cfg)
    assert [m.content for m in state.values["messages"]] == [
        "one",
        "reply 1",
        "two",
        "reply 3",
        "three",
        "reply 5",
    ]
    found = await saver.aget_tuple(cfg)
    assert found is not None
    version = found.checkpoint["channel_versions"]["messages"]
    assert isinstance(version, str) and len(version) == 13
    history = [s async for s in graph.aget_state_history(cfg)]
    assert len(history) == 9  # three runs of three checkpoints, none lost


def test_short_versions_count_up_and_sort_after_longer_ones(saver: PooledPostgresSaver) -> None:
    # LangGraph's own, then tgagent's earlier 19-character ones: a thread goes on from either.
    for before in ("00000000000000000000000000000041.0.7425187402218447", "0000000041.9f3c01ab"):
        first = saver.get_next_version(before, None)
        assert len(first) == 13 and first > before
        assert first.startswith("1000016")  # 42 in base 36
    first = saver.get_next_version("0000000041.9f3c01ab", None)
    second = saver.get_next_version(first, None)
    assert second.startswith("1000017") and second > first
    # Base-36 digits sort as the numbers do, past a carry too.
    tenth = saver.get_next_version("1000009zzzzzz", None)
    assert tenth.startswith("100000a") and tenth > "1000009zzzzzz"
    carried = saver.get_next_version("10000zzaaaaaa", None)
    assert carried.startswith("1000100") and carried > "10000zzaaaaaa"
    assert saver.get_next_version(None, None).startswith("1000001")
    # Two forks of a thread make different versions of the same step.
    assert len({saver.get_next_version(first, None) for _ in range(50)}) == 50


async def write_rows(pool: Pool, thread: str) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT task_id, idx, channel, type FROM checkpoint_writes WHERE thread_id = %s"
            " ORDER BY task_id, idx",
            (thread,),
        )
        return list(await cur.fetchall())


async def test_a_tasks_small_writes_share_a_row_and_read_back_in_order(
    saver: PooledPostgresSaver, pool: Pool
) -> None:
    saved = await saver.aput(config("p1"), empty_checkpoint(), {"source": "loop", "step": 0}, {})
    long = secrets.token_hex(400)  # compresses to about half: long enough for a row of its own
    writes = [("a", 1), ("long", long), ("b", "x"), ("c", {"n": [1, 2]}), ("d", None)]
    await saver.aput_writes(saved, writes, task_id="task-1")
    await saver.aput_writes(saved, [("only", "one")], task_id="task-2")
    await saver.aput_writes(saved, [(ERROR, ValueError("boom"))], task_id="task-3")
    rows = await write_rows(pool, "p1")
    assert [(r["task_id"], r["channel"]) for r in rows] == [
        ("task-1", PACKED),  # a, b, c, d
        ("task-1", "long"),
        ("task-2", "only"),  # alone: no pack
        ("task-3", ERROR),  # LangGraph's special writes keep their rows and indexes
    ]
    found = await saver.aget_tuple(saved)
    assert found is not None
    assert [(t, c, v) for t, c, v in found.pending_writes or [] if t != "task-3"] == [
        ("task-1", "a", 1),
        ("task-1", "long", long),
        ("task-1", "b", "x"),
        ("task-1", "c", {"n": [1, 2]}),
        ("task-1", "d", None),
        ("task-2", "only", "one"),
    ]
    error = [v for t, _, v in found.pending_writes or [] if t == "task-3"]
    assert len(error) == 1 and "boom" in str(error[0])


class Noted(TypedDict, total=False):
    note: str
    context: list[AnyMessage]
    step: int


def noting_graph(saver: Any) -> Any:
    """`remember` writes a long context (as build_context does), `count` a number."""

    def remember(state: Noted) -> dict[str, Any]:
        text = f"{state.get('note', '')} " + secrets.token_hex(300)
        return {"context": [AIMessage(text, id="c0")]}

    def count(state: Noted) -> dict[str, Any]:
        return {"step": state.get("step", 0) + 1}

    builder = StateGraph(Noted)
    builder.add_node("remember", remember)
    builder.add_node("count", count)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "count")
    builder.add_edge("count", END)
    return builder.compile(checkpointer=saver)


async def blob_rows(pool: Pool, thread: str, channel: str) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = %s AND channel = %s",
            (thread, channel),
        )
        return list(await cur.fetchall())


async def test_a_value_a_task_wrote_is_stored_once(saver: PooledPostgresSaver, pool: Pool) -> None:
    graph = noting_graph(saver)
    cfg = {
        "configurable": {"thread_id": "r1"},
        "metadata": {"conversation_id": "r1", "owner_id": 7},
    }
    async with saver.deferred("r1"):
        await graph.ainvoke({"note": "first"}, cfg)
    # The checkpoint after `remember` holds its context as a reference to the task's write.
    [context] = await blob_rows(pool, "r1", "context")
    assert context["type"].startswith("ref:") and context["blob"] is None
    state = await graph.aget_state(cfg)
    written = state.values["context"][0].content
    assert written.startswith("first ") and state.values["step"] == 1
    history = [s async for s in graph.aget_state_history(cfg)]
    assert [s.values.get("context", [None])[0] for s in history][:2] == [
        state.values["context"][0]
    ] * 2
    # The developer tools' reader resolves it the same way.
    found = await CheckpointReader(pool).saver.aget_tuple(cfg)
    assert found is not None
    assert found.checkpoint["channel_values"]["context"][0].content == written
    # The conversation is the thread: its id is not repeated in every checkpoint.
    assert found.metadata.get("owner_id") == 7 and "conversation_id" not in found.metadata
    # Outside a deferred turn the value is stored as it is.
    await graph.ainvoke({"note": "second"}, {"configurable": {"thread_id": "r2"}})
    assert [r["type"] for r in await blob_rows(pool, "r2", "context")] == ["msgpack+zlib"]


async def test_a_reference_to_a_lost_write_reads_as_no_value(
    saver: PooledPostgresSaver, pool: Pool
) -> None:
    graph = noting_graph(saver)
    cfg = {"configurable": {"thread_id": "r3"}}
    async with saver.deferred("r3"):
        await graph.ainvoke({"note": "x"}, cfg)
    async with pool.connection() as conn:
        await conn.execute(
            "DELETE FROM checkpoint_writes WHERE thread_id = 'r3' AND channel = 'context'"
        )
    # Read as stored (this saver would start the thread's next turn from what it read
    # back when it wrote the checkpoint, before the write was lost).
    state = await noting_graph(PooledPostgresSaver(pool)).aget_state(cfg)
    assert "context" not in state.values and state.values["step"] == 1


async def test_long_texts_are_stored_once_and_threads_written_before_keep_theirs(
    saver: PooledPostgresSaver, pool: Pool
) -> None:
    note = "Запомни: встреча в четверг в 10:00, взять документы и ноутбук. " * 3
    cfg = {"configurable": {"thread_id": "n1"}}
    # The stock saver keeps the text inline in each checkpoint.
    await noting_graph(AsyncPostgresSaver(pool)).ainvoke({"note": note}, cfg)
    graph = noting_graph(saver)
    await graph.ainvoke({}, cfg)  # the note does not change: still there
    assert (await graph.aget_state(cfg)).values["note"] == note
    async with saver.deferred("n2"):
        await graph.ainvoke({"note": note}, {"configurable": {"thread_id": "n2"}})
        await graph.ainvoke({}, {"configurable": {"thread_id": "n2"}})
    assert (await graph.aget_state({"configurable": {"thread_id": "n2"}})).values["note"] == note
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE checkpoint -> 'channel_values' ? 'note') AS inline,"
            " count(*) AS n FROM checkpoints WHERE thread_id = 'n2'"
        )
        row = await cur.fetchone()
    assert row is not None and row["n"] == 8 and row["inline"] == 0
    assert len(await blob_rows(pool, "n2", "note")) == 1  # one version, one row


def test_what_stays_inline_reads_back_as_it_was() -> None:
    assert _inline(None) and _inline(3) and _inline(True) and _inline("short")
    assert _inline([]) and _inline({"input": 0, "output": 12}) and _inline(["a", ["b"]])
    assert not _inline("x" * (INLINE_TEXT + 1))
    assert not _inline(list(range(40)))
    assert not _inline(("a", 1))  # JSON gives back a list
    assert not _inline({1: "a"})  # and string keys
    assert not _inline([float("nan")])
    assert not _inline([AIMessage("hi")])


async def two_turns(runtime_factory: Any, llm: FakeOpenAI) -> Any:
    """Return a runtime whose owner CAROL had two answered turns."""
    rt = await runtime_factory()
    for text in ("Hello", "Hi again"):
        llm.script(f"re: {text}")
        assert (await rt.service.handle_message(CAROL, text)).ok
        await rt.service.drain()
    return rt


async def test_a_turns_context_is_stored_once_and_dropped_once_answered(
    runtime_factory: Any, llm: FakeOpenAI, pool: Pool
) -> None:
    rt = await two_turns(runtime_factory, llm)
    thread = str(await rt.deps.conversations.get_or_create_conversation(CAROL.owner_id))
    cfg = {"configurable": {"thread_id": thread}}
    history = [s async for s in rt.service.graph.aget_state_history(cfg)]
    # The model's context is in the checkpoints of the steps that use it...
    seen = [s.values["context"] for s in history if s.next == ("agent",)]
    assert len(seen) == 2 and seen[0][-1].content.endswith("Hi again")
    # ...stored once per turn (the write of build_context; the value refers to it)...
    context_writes = await write_rows(pool, thread)
    assert sum(r["channel"] == "context" for r in context_writes) == 2
    types = [r["type"] for r in await blob_rows(pool, thread, "context")]
    assert len(types) == 2 and all(t.startswith("ref:") for t in types)
    # ...and not carried into the next turn: the thread's last checkpoint has none.
    assert history[0].values["context"] == []


@pytest.mark.server
async def test_reading_a_checkpoint_does_not_grow_with_the_thread(
    saver: PooledPostgresSaver, pool: Pool
) -> None:
    """Each channel's blob is found by its key: the read does not scan the thread's blobs,
    however long the conversation (LangGraph's own query hash-joined all of them while
    the tables were not analyzed yet: 4.6 ms at turn 300 of the bench)."""
    graph = noting_graph(saver)
    cfg = {"configurable": {"thread_id": "g1"}}
    for k in range(40):
        async with saver.deferred("g1"):
            await graph.ainvoke({"note": f"note {k} " * 20}, cfg)
    where = "WHERE thread_id = %s AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1"
    async with pool.connection() as conn:
        cur = await conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + saver.SELECT_SQL + where, ("g1",)
        )
        row = await cur.fetchone()
    assert row is not None
    plan = row["QUERY PLAN"][0]["Plan"]

    def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
        return [node, *(n for child in node.get("Plans", []) for n in nodes(child))]

    scans = {n["Relation Name"]: n for n in nodes(plan) if "Relation Name" in n}
    blobs = scans["checkpoint_blobs"]
    assert "version" in blobs["Index Cond"] and blobs["Actual Rows"] <= 1
    found = await saver.aget_tuple(cfg)
    assert found is not None and found.checkpoint["channel_values"]["note"].startswith("note 39")


@pytest.mark.server
async def test_the_turns_checkpoint_read_is_planned_at_every_read(fresh_schema: str) -> None:
    """The pool prepares every statement and PostgreSQL keeps a prepared statement's plan:
    one made while the tables were nearly empty scanned ever more rows as a conversation
    grew (0.8 ms at turn 1 of the bench, 2.1 ms at turn 300). The read is not prepared."""
    single = make_pool(fresh_schema, 1, 1)
    await single.open()
    try:
        saver = PooledPostgresSaver(single)
        await saver.setup()
        graph = noting_graph(saver)
        cfg = {"configurable": {"thread_id": "q1"}}
        for k in range(8):  # past PostgreSQL's five custom plans
            await graph.ainvoke({"note": f"n{k}"}, cfg)
            assert await saver.aget_tuple(cfg) is not None
        async with single.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM pg_prepared_statements WHERE statement LIKE %s",
                ["%jsonb_each_text(checkpoint%"],
            )
            row = await cur.fetchone()
        assert row is not None and row["n"] == 0
    finally:
        await single.close()


def spy_queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the text of every query a cursor executes from now on."""
    seen: list[str] = []
    original = psycopg.AsyncCursor.execute

    async def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(query))
        return await original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", execute)
    return seen


def same_tuple(got: Any, expected: Any) -> None:
    assert got is not None and expected is not None
    assert got.config == expected.config and got.parent_config == expected.parent_config
    assert got.checkpoint == expected.checkpoint and got.metadata == expected.metadata
    assert got.pending_writes == expected.pending_writes


async def test_a_turn_starts_from_the_checkpoint_its_last_turn_read_back(
    saver: PooledPostgresSaver, pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's last write reads the thread's last checkpoint back in its own transaction;
    the next turn's start then only checks that it is still the last one."""
    graph = noting_graph(saver)
    cfg = {"configurable": {"thread_id": "k1"}}
    for k in range(3):
        async with saver.deferred("k1"):
            await graph.ainvoke({"note": f"note {k} " * 20}, cfg)
    expected = await PooledPostgresSaver(pool).aget_tuple(cfg)  # read as stored
    seen = spy_queries(monkeypatch)
    same_tuple(await saver.aget_tuple(cfg), expected)
    assert not any("jsonb_each_text" in q for q in seen)  # not the full read
    # Kept for one read: the next reads the database.
    same_tuple(await saver.aget_tuple(cfg), expected)
    assert any("jsonb_each_text" in q for q in seen)


async def test_a_kept_checkpoint_is_not_used_once_another_is_the_last(
    saver: PooledPostgresSaver, pool: Pool
) -> None:
    """Another process (a saver of its own) wrote a turn since, or the thread is gone."""
    cfg = {"configurable": {"thread_id": "k2"}}
    async with saver.deferred("k2"):
        await noting_graph(saver).ainvoke({"note": "mine"}, cfg)
    other = PooledPostgresSaver(pool)
    await noting_graph(other).ainvoke({"note": "theirs"}, cfg)
    found = await saver.aget_tuple(cfg)
    assert found is not None
    assert found.checkpoint["channel_values"]["note"] == "theirs"
    async with saver.deferred("k2"):
        await noting_graph(saver).ainvoke({"note": "again"}, cfg)
    await other.adelete_thread("k2")
    assert await saver.aget_tuple(cfg) is None


async def test_a_turn_after_an_answered_one_reads_the_kept_checkpoint(
    runtime_factory: Any, llm: FakeOpenAI, pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = await two_turns(runtime_factory, llm)
    seen = spy_queries(monkeypatch)
    llm.script("re: third")
    assert (await rt.service.handle_message(CAROL, "Third")).reply == "re: third"
    await rt.service.drain()
    reads = [i for i, q in enumerate(seen) if "jsonb_each_text" in q]
    checks = [i for i, q in enumerate(seen) if "SELECT checkpoint_id FROM" in q]
    # The turn's lease read the thread's last checkpoint id, and its run used the kept
    # checkpoint without looking again; only its last write read the thread back (for
    # the next turn).
    assert len(checks) == 1 and "telegram_user_id" in seen[checks[0]]
    assert len(reads) == 1 and checks[0] < reads[0]


async def test_a_confirmed_checkpoint_id_spares_the_look_only_when_it_is_the_kept_one(
    saver: PooledPostgresSaver, pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn reads its thread's last checkpoint id with its lease (`confirm_latest`): the
    kept checkpoint is then used without a query; an id that is another's (a process
    wrote since) is no proof, and the read looks as before."""
    cfg = {"configurable": {"thread_id": "k3"}}
    async with saver.deferred("k3"):
        await noting_graph(saver).ainvoke({"note": "mine"}, cfg)
    expected = await PooledPostgresSaver(pool).aget_tuple(cfg)
    assert expected is not None
    saver.confirm_latest("k3", expected.config["configurable"]["checkpoint_id"])
    seen = spy_queries(monkeypatch)
    same_tuple(await saver.aget_tuple(cfg), expected)
    assert seen == []
    monkeypatch.undo()

    async with saver.deferred("k3"):
        await noting_graph(saver).ainvoke({"note": "again"}, cfg)
    other = PooledPostgresSaver(pool)
    await noting_graph(other).ainvoke({"note": "theirs"}, cfg)
    saver.confirm_latest("k3", "not-the-last")
    found = await saver.aget_tuple(cfg)
    assert found is not None and found.checkpoint["channel_values"]["note"] == "theirs"


async def test_a_read_waits_for_the_threads_writes_under_way(
    saver: PooledPostgresSaver, pool: Pool
) -> None:
    """The turn's caller has its reply while the turn's checkpoints are being written: a
    read of the thread right then still finds them."""
    async with saver.deferred("w1"):
        saved = await put(saver, "w1")
        writing = asyncio.ensure_future(saver.flush("w1"))
        await asyncio.sleep(0)  # the statements are taken, their transaction under way
        found = await saver.aget_tuple(config("w1"))
        await writing
    assert found is not None
    assert found.config["configurable"]["checkpoint_id"] == saved["configurable"]["checkpoint_id"]


async def test_a_deferred_turns_values_are_serialized_when_written(
    saver: PooledPostgresSaver, pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Serializing (and compressing) a turn's values is work for after its reply."""
    dumped: list[Any] = []
    original = saver.serde.dumps_typed

    def dumps_typed(value: Any) -> tuple[str, bytes]:
        dumped.append(value)
        return original(value)

    monkeypatch.setattr(saver.serde, "dumps_typed", dumps_typed)
    graph = noting_graph(saver)
    cfg = {"configurable": {"thread_id": "s1"}}
    async with saver.deferred("s1"):
        await graph.ainvoke({"note": "long " * 40}, cfg)
        assert dumped == []
        await saver.flush("s1")
        assert dumped
    found = await PooledPostgresSaver(pool).aget_tuple(cfg)
    assert found is not None and found.checkpoint["channel_values"]["note"] == "long " * 40
    assert found.checkpoint["channel_values"]["step"] == 1
