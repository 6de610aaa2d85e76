"""The turn's checkpointer: writes deferred to after the reply, and never a WAL flush."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from bench.harness import DbCounter
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
