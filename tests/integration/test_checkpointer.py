"""The turn's checkpointer: writes deferred to after the reply, and never a WAL flush."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from bench.harness import DbCounter
from src.devtools.checkpoints import CheckpointReader
from src.services.agent_service import Identity
from src.storage.checkpointer import PooledPostgresSaver
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
    """Return the stored type tags of the thread's messages channel and task writes."""
    async with pool.connection() as conn:
        blobs = await conn.execute(
            "SELECT type FROM checkpoint_blobs WHERE thread_id = %s AND channel = 'messages'",
            (thread,),
        )
        writes = await conn.execute(
            "SELECT type FROM checkpoint_writes WHERE thread_id = %s AND channel = 'messages'",
            (thread,),
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
    assert isinstance(version, str) and len(version) == 19
    history = [s async for s in graph.aget_state_history(cfg)]
    assert len(history) == 9  # three runs of three checkpoints, none lost


def test_short_versions_count_up_and_sort_after_long_ones(saver: PooledPostgresSaver) -> None:
    long = "00000000000000000000000000000041.0.7425187402218447"
    first = saver.get_next_version(long, None)
    assert first.startswith("0000000042.") and len(first) == 19 and first > long
    second = saver.get_next_version(first, None)
    assert second.startswith("0000000043.") and second > first
    assert saver.get_next_version(None, None).startswith("0000000001.")
