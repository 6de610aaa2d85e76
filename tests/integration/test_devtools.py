"""Devtools over real PostgreSQL and the local model server: runs, replay, prune, Studio."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from src.devtools.checkpoints import CheckpointReader
from src.devtools.common import DevtoolsError, require_checkpoint_tables
from src.devtools.prune import prune_checkpoints
from src.devtools.replay import replay
from src.devtools.replay_view import format_outcome, outcome_json
from src.devtools.runs import detail_json, format_turn_detail, format_turn_list, turn_detail
from src.devtools.sandbox import OWNER_ROWS, SandboxPool, connect_like, copy_owner
from src.devtools.turns import Turn
from src.graph.main_graph import NODE_NAMES
from src.services.agent_service import Identity
from tests.conftest import make_settings

ALICE = Identity(201, "alice", "Alice", "en")
BOB = Identity(202, "bob", "Bob", "en")
USER_TABLES = (
    "users",
    "conversations",
    "messages",
    "facts",
    "session_compacts",
    "squash_log",
    "turn_leases",
)
CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
REPLIES = ("Nice to meet you, Alice!", "Your cat is called Barsik.", "Goodbye!")


@dataclass
class Seeded:
    """Three turns of Alice's (the second calls a tool) and one of Bob's."""

    runtime: Any
    thread: str
    bob_thread: str


async def _seed(runtime_factory: Any, llm: Any) -> Seeded:
    rt = await runtime_factory()
    llm.script(REPLIES[0])
    await rt.service.handle_message(ALICE, "Hi, I'm Alice and my cat is called Barsik")
    llm.script(
        {"tool_calls": [{"name": "search_history", "args": {"query": "Barsik"}}]}, REPLIES[1]
    )
    await rt.service.handle_message(ALICE, "What is my cat called?")
    llm.script(REPLIES[2])
    await rt.service.handle_message(ALICE, "Bye")
    llm.script("Hello Bob")
    await rt.service.handle_message(BOB, "Hello")
    await rt.service.drain()
    thread = await rt.deps.conversations.get_or_create_conversation(ALICE.owner_id)
    bob = await rt.deps.conversations.get_or_create_conversation(BOB.owner_id)
    return Seeded(rt, str(thread), str(bob))


async def snapshot(pool: AsyncConnectionPool[Any], tables: tuple[str, ...]) -> dict[str, Any]:
    """Return each table's row count and a checksum of all its rows."""
    out = {}
    async with pool.connection() as conn:
        for table in tables:
            cur = await conn.execute(
                "SELECT count(*) AS n,"
                " md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) AS sum"
                f" FROM {table} t"
            )
            row = await cur.fetchone()
            out[table] = (row["n"], row["sum"])
    return out


async def _alice_turns(pool: AsyncConnectionPool[Any], thread: str) -> list[Turn]:
    reader = CheckpointReader(pool)
    turns = await reader.turns(thread)
    for turn in turns:
        await reader.load_values(turn)
    return turns


async def test_runs_list_newest_first_with_nodes_tools_tokens(
    seeded: Seeded, pool: AsyncConnectionPool[Any]
) -> None:
    turns = await CheckpointReader(pool).recent_turns(None, 10)
    assert [t.input_text for t in turns] == [
        "Hello",
        "Bye",
        "What is my cat called?",
        "Hi, I'm Alice and my cat is called Barsik",
    ]
    assert [t.user_id for t in turns] == [BOB.owner_id] + [ALICE.owner_id] * 3
    tool_turn = turns[2]
    assert tool_turn.thread_id == seeded.thread and tool_turn.status == "ok"
    assert tool_turn.nodes == [
        "build_context",
        "agent",
        "tools",
        "agent",
        "log_tools",
        "save_response",
    ]
    assert tool_turn.tools_used == ["search_history"]
    assert tool_turn.usage["input"] > 0 and tool_turn.usage["output"] > 0
    assert tool_turn.reply == REPLIES[1] and tool_turn.duration_ms > 0
    assert tool_turn.head.source == "input" and tool_turn.head.next_nodes == ["__start__"]
    text = format_turn_list(turns)
    assert text.index("'Bye'") < text.index("'What is my cat called?'")
    assert tool_turn.head.checkpoint_id in text and "search_history" in text

    only_alice = await CheckpointReader(pool).recent_turns(ALICE.owner_id, 2)
    assert [t.input_text for t in only_alice] == ["Bye", "What is my cat called?"]
    assert await CheckpointReader(pool).recent_turns(999, 5) == []


async def test_runs_show_one_turn_node_by_node(
    seeded: Seeded, pool: AsyncConnectionPool[Any]
) -> None:
    reader = CheckpointReader(pool)
    turns = await reader.turns(seeded.thread)
    middle = turns[1].steps[3].checkpoint_id  # any checkpoint of the turn selects it
    detail = await turn_detail(reader, seeded.thread[:8], middle[:20])
    assert detail["index"] == 2 and detail["count"] == 3
    data = detail_json(detail)
    json.dumps(data)  # plain JSON all the way down
    ran = [n for step in data["steps"] for n in step["nodes"]]
    assert ran[0] == "__start__" and ran[-1] == "save_response" and "tools" in ran
    writes = {(w["node"], w["channel"]) for s in data["steps"] for w in s["writes"]}
    assert ("tools", "messages") in writes and ("save_response", "reply") in writes
    assert all(s["ms"] is not None for s in data["steps"][:-1])
    text = format_turn_detail(detail)
    assert "turn 2 of 3" in text and "calls search_history" in text
    # build_context's context: the system prompt, the numbered history, the message.
    assert "context: system prompt (" in text
    assert "context: user: '[3] User: [" in text and "What is my cat called?'" in text
    assert f"reply: '{REPLIES[1]}'" in text and "(end of turn)" in text
    # save_response drops the answered context: the next turn builds its own.
    assert ("save_response", "context") in writes and "context: cleared (answered)" in text

    latest = await turn_detail(reader, seeded.thread, None)
    assert latest["index"] == 3 and latest["turn"].reply == REPLIES[2]


async def test_bad_thread_and_checkpoint_are_clear_errors(
    seeded: Seeded, pool: AsyncConnectionPool[Any]
) -> None:
    reader = CheckpointReader(pool)
    with pytest.raises(DevtoolsError, match="no checkpoints for thread") as exc:
        await turn_detail(reader, "no-such-thread", None)
    assert exc.value.code == 1
    with pytest.raises(DevtoolsError, match="has no checkpoint 'ffff'"):
        await turn_detail(reader, seeded.thread, "ffff")
    with pytest.raises(DevtoolsError, match="ambiguous"):
        await turn_detail(reader, seeded.thread, "1")


async def test_no_checkpoint_tables_is_a_clear_error(pool: AsyncConnectionPool[Any]) -> None:
    with pytest.raises(DevtoolsError, match="no LangGraph checkpoint tables") as exc:
        await require_checkpoint_tables(pool)
    assert exc.value.code == 2


async def test_replay_dry_run_shows_both_replies_and_changes_no_row(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    turns = await _alice_turns(pool, seeded.thread)
    before = await snapshot(pool, USER_TABLES + CHECKPOINT_TABLES)
    llm.clear()
    llm.script_for("gpt-4.1-mini", "Barsik, of course — replayed.")
    settings = make_settings(llm)
    outcome = await replay(
        pool, settings, seeded.thread, turns[1].head.checkpoint_id, model="gpt-4.1-mini"
    )
    assert outcome.error is None and outcome.reply == "Barsik, of course — replayed."
    assert outcome.recorded is not None and outcome.recorded.reply == REPLIES[1]
    assert outcome.nodes[0] == "build_context" and outcome.nodes[-1] == "save_response"
    assert outcome.model_seen == "gpt-4.1-mini" and outcome.hidden_messages == 6
    # The model saw the conversation as it was at turn 2: nothing of turn 3.
    request = llm.requests_for("gpt-4.1-mini")[0]
    texts = [str(m.get("content")) for m in request["messages"]]
    assert any("What is my cat called?" in t for t in texts)
    assert not any("Bye" in t for t in texts)
    assert await snapshot(pool, USER_TABLES + CHECKPOINT_TABLES) == before
    report = format_outcome(outcome, width=120)
    assert REPLIES[1] in report and "Barsik, of course" in report
    assert "dry run" in report and "the replies differ" in report
    assert outcome_json(outcome)["replay"]["reply"] == outcome.reply


async def test_replay_ran_the_writes_inside_the_sandbox(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    """The replay's nodes really inserted rows before the rollback (sequences never roll
    back), and each replay saw the context of its own checkpoint."""
    turns = await _alice_turns(pool, seeded.thread)
    seen: list[int] = []

    def reply(request: dict[str, Any]) -> str:
        seen.append(len(request["messages"]))
        return "again"

    async def last_message_id() -> int:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT last_value FROM pg_sequences WHERE sequencename = 'messages_id_seq'"
                " AND schemaname = current_schema()"
            )
            return int((await cur.fetchone())["last_value"])

    llm.script(reply, reply)
    settings = make_settings(llm)
    before = await last_message_id()
    first = await replay(pool, settings, seeded.thread, turns[0].head.checkpoint_id)
    assert first.reply == "again" and first.hidden_messages == 8
    mid = next(s for s in turns[1].steps if s.nodes == ["agent"])
    second = await replay(pool, settings, seeded.thread, mid.checkpoint_id)
    assert second.nodes[0] == "agent" and second.reply == "again"
    assert seen == [2, 4]  # system + [1]; system + [1] [2] [3], as recorded for turn 2
    assert await last_message_id() == before + 2  # each replay's save_response inserted


async def test_replay_commit_forks_the_thread_and_keeps_users_tables(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    turns = await _alice_turns(pool, seeded.thread)
    ids_before = {s.checkpoint_id for t in turns for s in t.steps}
    users_before = await snapshot(pool, USER_TABLES)
    llm.script("A forked answer.")
    outcome = await replay(
        pool, make_settings(llm), seeded.thread, turns[1].head.checkpoint_id, commit=True
    )
    assert outcome.error is None and outcome.fork_id and outcome.last_checkpoint_id
    assert await snapshot(pool, USER_TABLES) == users_before
    listed = await CheckpointReader(pool).recent_turns(ALICE.owner_id, 10)
    fork = listed[0]
    assert fork.head.checkpoint_id == outcome.fork_id and fork.head.source == "fork"
    assert fork.replay_of == turns[1].head.checkpoint_id
    assert fork.reply == "A forked answer." and fork.input_text == "What is my cat called?"
    assert fork.last.checkpoint_id == outcome.last_checkpoint_id
    assert len(listed) == 4
    after = {
        s.checkpoint_id for t in await CheckpointReader(pool).turns(seeded.thread) for s in t.steps
    }
    assert ids_before < after  # the original turns are all still there
    assert f"fork {outcome.fork_id}" in format_outcome(outcome, width=100)
    # The bot's next turn in this conversation starts after the fork and is unaffected.
    llm.script("still fine")
    result = await seeded.runtime.service.handle_message(ALICE, "Are you there?")
    assert result.ok and result.reply == "still fine"


async def test_a_live_turn_does_not_wait_for_a_replay(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    """Issue 16: the replay runs on a copy of the owner's rows, so the owner's live turn
    beside a replay whose model takes 5 seconds is answered at once."""
    turns = await _alice_turns(pool, seeded.thread)
    asked = threading.Event()

    async def slow(request: dict[str, Any]) -> str:
        asked.set()
        await asyncio.sleep(5)
        return "replayed slowly"

    llm.script_for("gpt-4.1-mini", slow)
    replaying = asyncio.create_task(
        replay(pool, make_settings(llm), seeded.thread, turns[0].head.checkpoint_id, "gpt-4.1-mini")
    )
    for _ in range(500):  # the replay has rewound and copied, and waits for its model
        if asked.is_set() or replaying.done():
            break
        await asyncio.sleep(0.02)
    assert asked.is_set()
    llm.script("live answer")
    started = time.monotonic()
    result = await asyncio.wait_for(seeded.runtime.service.handle_message(ALICE, "Hi?"), 10)
    assert time.monotonic() - started < 1.0 and not replaying.done()
    assert result.ok and result.reply == "live answer"
    outcome = await replaying
    assert outcome.error is None and outcome.reply == "replayed slowly"
    # The replay saw the conversation as at its checkpoint, not the live turn.
    request = llm.requests_for("gpt-4.1-mini")[0]
    assert not any("Hi?" in str(m.get("content")) for m in request["messages"])


async def test_replay_refuses_end_of_turn_and_other_graph_versions(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    turns = await _alice_turns(pool, seeded.thread)
    settings = make_settings(llm)
    with pytest.raises(DevtoolsError, match="where its turn ended") as exc:
        await replay(pool, settings, seeded.thread, turns[1].last.checkpoint_id)
    assert exc.value.code == 1 and turns[1].head.checkpoint_id in str(exc.value)
    head = turns[1].head.checkpoint_id
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE checkpoints SET checkpoint = jsonb_set(jsonb_set(checkpoint,"
            " '{versions_seen,planner}', '{}'), '{channel_versions,plan}', '\"1\"')"
            " WHERE checkpoint_id = %s",
            (head,),
        )
    with pytest.raises(DevtoolsError, match="another version of the graph") as exc:
        await replay(pool, settings, seeded.thread, head)
    assert exc.value.code == 3 and "planner" in str(exc.value) and "plan" in str(exc.value)


async def test_replay_of_a_deleted_conversation_is_refused(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    turns = await _alice_turns(pool, seeded.bob_thread)
    async with pool.connection() as conn:
        await conn.execute(
            "DELETE FROM conversations WHERE id = %s", (uuid.UUID(seeded.bob_thread),)
        )
    with pytest.raises(DevtoolsError, match="no longer exists"):
        await replay(pool, make_settings(llm), seeded.bob_thread, turns[0].head.checkpoint_id)


async def test_prune_keeps_exactly_the_last_turns_and_drops_orphans(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    for text in ("four", "five"):
        llm.script(f"re: {text}")
        await seeded.runtime.service.handle_message(ALICE, text)
    # The reply comes before the turn's memory steps end: their checkpoints come later.
    await seeded.runtime.service.drain()
    before = await _alice_turns(pool, seeded.thread)
    assert len(before) == 5
    kept_before = {s.checkpoint_id: s for t in before[-2:] for s in t.steps}
    reader = CheckpointReader(pool)
    values_before = {
        cid: (await reader.tuple(seeded.thread, cid)).checkpoint["channel_values"]
        for cid in kept_before
    }
    async with pool.connection() as conn:
        await conn.execute(
            "DELETE FROM conversations WHERE id = %s", (uuid.UUID(seeded.bob_thread),)
        )
        cur = await conn.execute("SELECT count(*) AS n FROM checkpoint_blobs")
        blobs_before = (await cur.fetchone())["n"]

    totals = await prune_checkpoints(pool, keep=2)

    after = await _alice_turns(pool, seeded.thread)
    assert [t.input_text for t in after] == ["four", "five"]
    assert [t.reply for t in after] == ["re: four", "re: five"]
    assert {s.checkpoint_id for t in after for s in t.steps} == set(kept_before)
    for cid, values in values_before.items():  # every kept checkpoint still loads whole
        assert (await reader.tuple(seeded.thread, cid)).checkpoint["channel_values"] == values
    assert totals["turns_deleted"] == 3 and totals["orphan_threads_deleted"] == 1
    async with pool.connection() as conn:
        for table in CHECKPOINT_TABLES:
            cur = await conn.execute(
                f"SELECT count(*) AS n FROM {table} WHERE thread_id = %s", (seeded.bob_thread,)
            )
            assert (await cur.fetchone())["n"] == 0
        cur = await conn.execute("SELECT count(*) AS n FROM checkpoint_blobs")
        assert (await cur.fetchone())["n"] < blobs_before
    again = await prune_checkpoints(pool, keep=2)
    assert again["checkpoints_deleted"] == 0 and again["orphan_threads_deleted"] == 0
    llm.script("after prune")
    result = await seeded.runtime.service.handle_message(ALICE, "six")
    assert result.ok and result.reply == "after prune"
    # A replay from a kept turn still works after pruning.
    llm.script("replayed after prune")
    outcome = await replay(pool, make_settings(llm), seeded.thread, after[0].head.checkpoint_id)
    assert outcome.reply == "replayed after prune"


async def test_sandbox_pool_rolls_back_and_isolates_failures(
    pool: AsyncConnectionPool[Any],
) -> None:
    async with pool.connection() as conn, conn.transaction(force_rollback=True):
        sandbox = SandboxPool(conn)
        async with sandbox.connection() as c:
            await c.execute("INSERT INTO users (telegram_user_id) VALUES (1)")
            async with sandbox.connection() as again:  # the same task may borrow again
                await again.execute("INSERT INTO users (telegram_user_id) VALUES (2)")
        with pytest.raises(Exception, match="duplicate key"):
            async with sandbox.connection() as c:
                await c.execute("INSERT INTO users (telegram_user_id) VALUES (1)")
        async with sandbox.connection() as c:  # the failure above was undone alone
            cur = await c.execute("SELECT count(*) AS n FROM users")
            assert (await cur.fetchone())["n"] == 2
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM users")
        assert (await cur.fetchone())["n"] == 0


async def test_copy_owner_shadows_the_users_tables_with_the_owners_rows(
    seeded: Seeded, pool: AsyncConnectionPool[Any]
) -> None:
    before = await snapshot(pool, USER_TABLES)
    conn = await connect_like(pool)
    try:
        copied = await copy_owner(conn, ALICE.owner_id)
        assert set(copied) >= set(USER_TABLES) - {"turn_leases"}
        assert copied["users"] == 1 and copied["conversations"] == 1
        cur = await conn.execute("SELECT DISTINCT owner_id FROM messages")
        assert [r["owner_id"] for r in await cur.fetchall()] == [ALICE.owner_id]
        assert copied["messages"] == 9  # three turns, the second with a tool call
        await conn.execute("DELETE FROM messages")
        await conn.execute("UPDATE users SET first_name = 'Mallory'")
        conversation = uuid.UUID(seeded.thread)
        await conn.execute(  # the copy's trigger still fills the search columns
            "INSERT INTO messages (conversation_id, number, role, content)"
            " VALUES (%s, 99, 'user', 'hello copy')",
            (conversation,),
        )
        cur = await conn.execute("SELECT owner_id, search_vector IS NOT NULL AS s FROM messages")
        assert await cur.fetchall() == [{"owner_id": ALICE.owner_id, "s": True}]
    finally:
        await conn.close()
    assert await snapshot(pool, USER_TABLES) == before


async def test_the_replay_copies_every_table_the_graph_may_write(
    seeded: Seeded, pool: AsyncConnectionPool[Any]
) -> None:
    """A new users' table must join OWNER_ROWS, or a replay would write the real one."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
        tables = {r["table_name"] for r in await cur.fetchall()}
    not_users = {"schema_versions", "turn_leases", *CHECKPOINT_TABLES, "checkpoint_migrations"}
    not_users.add("chat_moves")  # groups' upgrades: the bot records them, never a turn
    not_users |= {t for t in tables if t.startswith("procrastinate_")}  # the job queue's
    assert tables - not_users == {table for table, _ in OWNER_ROWS}


async def test_studio_factories_serve_the_graph(
    pool: AsyncConnectionPool[Any],
    fresh_schema: str,
    llm: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from src.devtools import studio

    config = json.loads((Path(__file__).resolve().parents[2] / "langgraph.json").read_text())
    assert config["dependencies"] == ["."] and config["env"] == ".env"
    for ref in config["graphs"].values():
        path, name = ref.split(":")
        assert path == "./src/devtools/studio.py" and callable(getattr(studio, name))
    monkeypatch.chdir(tmp_path)  # no .env
    monkeypatch.setenv("DATABASE_URL", _as_url(fresh_schema))
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    async with studio.make_graph({}) as graph:
        assert set(NODE_NAMES) <= set(graph.get_graph().nodes)
        assert graph.checkpointer is None  # the server brings its own
    llm.script("Hi from Studio")
    async with studio.make_chat_graph({}) as chat:
        out = await chat.ainvoke({"user_id": 7, "text": "Hello from Studio"})
    assert out["reply"] == "Hi from Studio"
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT role, content FROM messages ORDER BY id")
        rows = await cur.fetchall()
    assert [r["role"] for r in rows] == ["user", "assistant"]
    assert rows[0]["content"].endswith("] Hello from Studio")


def _as_url(dsn: str) -> str:
    from urllib.parse import quote, urlencode

    import psycopg

    info = psycopg.conninfo.conninfo_to_dict(dsn)
    dbname = str(info.pop("dbname", "") or "")
    query = urlencode({k: str(v) for k, v in info.items() if v is not None}, quote_via=quote)
    return f"postgresql:///{quote(dbname)}?{query}"


async def test_runs_and_replay_show_the_model_the_user_chose(
    runtime_factory: Any, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    rt = await runtime_factory(model_choices="gpt-4.1-mini", fallback_model="fake-model")
    assert await rt.service.set_model(ALICE, "gpt-4.1-mini")
    llm.script_for("gpt-4.1-mini", "Answered by the chosen one.")
    await rt.service.handle_message(ALICE, "Who answers?")
    llm.fail_next(1, 500)
    llm.script_for("fake-model", "Answered by the fallback.")
    await rt.service.handle_message(ALICE, "And now?")
    await rt.service.drain()
    thread = str(await rt.deps.conversations.get_or_create_conversation(ALICE.owner_id))
    first, second = await _alice_turns(pool, thread)
    assert (first.model, first.fallback) == ("gpt-4.1-mini", False)
    assert (second.model, second.fallback) == ("fake-model", True)
    listing = format_turn_list([second, first])
    assert "model       fake-model (fallback)" in listing and "model       gpt-4.1-mini" in listing
    # A replay without --model runs the model the turn chose, not LLM_MODEL.
    llm.clear()
    llm.script_for("gpt-4.1-mini", "Replayed by the chosen one.")
    outcome = await replay(pool, make_settings(llm), thread, first.head.checkpoint_id)
    assert outcome.reply == "Replayed by the chosen one." and outcome.model == "gpt-4.1-mini"
    assert [r["model"] for r in llm.requests] == ["gpt-4.1-mini"]


async def test_a_replayed_schedule_task_leaves_no_task_and_no_job(
    seeded: Seeded, pool: AsyncConnectionPool[Any], llm: Any
) -> None:
    """A replay whose model schedules a task runs the tool on the copy: neither the task
    nor the job waiting for its slot outlives the replay (the job's insert is in the
    replay's transaction, never committed)."""
    turns = await _alice_turns(pool, seeded.thread)

    async def counts() -> tuple[int, int]:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT (SELECT count(*) FROM scheduled_tasks) AS tasks,"
                " (SELECT count(*) FROM procrastinate_jobs"
                "  WHERE task_name = 'tgagent.task_due') AS jobs"
            )
            row = await cur.fetchone()
            return int(row["tasks"]), int(row["jobs"])

    before = await counts()
    call = {"name": "schedule_task", "args": {"when": "in 1 hour", "instruction": "Feed Barsik"}}
    llm.script({"tool_calls": [call]}, "Scheduled, replayed.")
    outcome = await replay(pool, make_settings(llm), seeded.thread, turns[1].head.checkpoint_id)
    assert outcome.error is None and outcome.reply == "Scheduled, replayed."
    tool_results = [
        str(m.get("content")) for m in llm.requests[-1]["messages"] if m.get("role") == "tool"
    ]
    assert any("Scheduled task #" in r for r in tool_results)  # the tool really ran
    assert await counts() == before
