"""`tgagent replay`: run a recorded turn again from one of its checkpoints with the current
code and a chosen model, beside what was recorded.

Nothing reaches users' tables, and nothing of them is locked while the replay runs: the
graph runs on a connection of its own whose users' tables are temporary copies of the
owner's rows (src/devtools/sandbox.py), inside a transaction that is rolled back. There
the conversation is first rewound to the messages it had at that checkpoint, so the
model does not see later turns. The run starts
from a copy of the checkpoint (LangGraph's `update_state(..., as_node="__copy__")`, a fork):
in an in-memory saver for a dry run, or in the thread itself with `--commit`.

The MCP servers (MCP_CONFIG) are started for their tools' schemas, and none is called: a
call of the replayed turn gets the result recorded when the turn ran (src/graph/mcp/once.py),
a call it did not make an error saying so. With `live_tools` the tools are called.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from src.config import Settings
from src.devtools.checkpoints import CheckpointReader
from src.devtools.common import EXIT_BAD_INPUT, EXIT_INCOMPATIBLE, DevtoolsError
from src.devtools.graph_view import offline_graph
from src.devtools.sandbox import SandboxPool, connect_like, copy_owner
from src.devtools.turns import Turn, turn_containing
from src.graph.deps import GraphDeps
from src.graph.main_graph import build_graph
from src.graph.mcp.tools import start_mcp
from src.services.factory import make_deps
from src.services.llm_service import make_chat_model
from src.storage.checkpoint_rows import next_version
from src.storage.mcp_calls_repo import McpCallRepository

SELECT_OWNER = "SELECT telegram_user_id FROM conversations WHERE id = %s"
REWIND_MESSAGES = "DELETE FROM messages WHERE conversation_id = %s AND number > %s"
REWIND_NUMBER = "UPDATE conversations SET next_message_number = %s WHERE id = %s"


@dataclass
class ReplayOutcome:
    """What a replay did, beside what the recorded turn did."""

    thread_id: str
    checkpoint_id: str
    next_nodes: list[str]
    recorded: Turn | None
    turn_index: int | None
    model: str
    committed: bool
    reply: str = ""
    nodes: list[str] = field(default_factory=list)
    tools_used: list[str] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    ms: float = 0.0
    error: str | None = None
    fork_id: str | None = None
    last_checkpoint_id: str | None = None
    kept_messages_upto: int | None = None
    hidden_messages: int = 0
    model_seen: str | None = None


def check_compatible(graph: Any, saved: CheckpointTuple) -> None:
    """Refuse a checkpoint that names nodes or state channels the current graph lacks."""
    checkpoint = saved.checkpoint
    channels = set(checkpoint.get("channel_versions") or {}) - set(graph.channels)
    nodes = {
        name
        for name in checkpoint.get("versions_seen") or {}
        if name not in graph.nodes and not name.startswith("__")
    }
    if channels or nodes:
        parts = []
        if nodes:
            parts.append("nodes " + ", ".join(sorted(nodes)))
        if channels:
            parts.append("state channels " + ", ".join(sorted(channels)))
        raise DevtoolsError(
            f"checkpoint {checkpoint['id']} was written by another version of the graph: "
            f"it has {' and '.join(parts)} that the current graph does not. Replaying it "
            "would not run what was recorded; replay a turn recorded since the graph "
            "changed (see `tgagent runs list`).",
            EXIT_INCOMPATIBLE,
        )


# Nodes a turn recorded before the context had a channel of its own can be replayed from:
# every later node reads `context`, which such a checkpoint does not have.
BEFORE_CONTEXT = frozenset({"__start__", "build_context"})


def check_context(saved: CheckpointTuple, next_nodes: Sequence[str]) -> None:
    """Refuse to replay from the middle of a turn recorded when the model's context was
    part of `messages`; its first checkpoint replays the whole turn."""
    versions = saved.checkpoint.get("channel_versions") or {}
    if "context" in versions or "messages" not in versions:
        return
    if set(next_nodes) <= BEFORE_CONTEXT:
        return
    raise DevtoolsError(
        f"checkpoint {saved.checkpoint['id']} was recorded before the model's context had a "
        "state channel of its own, so the nodes after it cannot run from it; replay the "
        "whole turn from its first checkpoint (see `tgagent runs show`).",
        EXIT_INCOMPATIBLE,
    )


def messages_kept(values: dict[str, Any]) -> int | None:
    """Return the last message number the conversation had at this checkpoint."""
    start = values.get("__start__")
    effective = {**values, **start} if isinstance(start, dict) else values
    number, stored = effective.get("input_number"), effective.get("stored_count")
    if isinstance(number, int) and isinstance(stored, int):
        return number + stored - 1
    return None


class _MemorySaver(InMemorySaver):
    """A dry run's saver: in memory, with the channel versions of the product's saver
    (the run goes on from its checkpoint, and versions compare as strings)."""

    def get_next_version(self, current: str | None, channel: None) -> str:
        return next_version(current)


async def _copy_into_memory(saver: InMemorySaver, saved: CheckpointTuple) -> dict[str, Any]:
    conf = saved.config["configurable"]
    parent = saved.parent_config or {
        "configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": ""}
    }
    versions = dict(saved.checkpoint["channel_versions"])
    return dict(await saver.aput(parent, saved.checkpoint, saved.metadata, versions))


async def _owner_of(pool: AsyncConnectionPool[Any], conversation_id: uuid.UUID) -> int:
    """Return whose conversation it is, or refuse one that no longer exists."""
    async with pool.connection() as conn:
        row = await (await conn.execute(SELECT_OWNER, (conversation_id,))).fetchone()
    if row is None:
        raise DevtoolsError(
            f"conversation {conversation_id} no longer exists (ended with /new?): its "
            "messages are gone, so its turns cannot be replayed"
        )
    return int(row["telegram_user_id"])


async def _rewind(conn: Any, conversation_id: uuid.UUID, upto: int | None) -> int:
    """In the copy, drop messages stored after the checkpoint; return how many."""
    if upto is None:
        return 0
    cur = await conn.execute(REWIND_MESSAGES, (conversation_id, upto))
    await conn.execute(REWIND_NUMBER, (upto + 1, conversation_id))
    return int(cur.rowcount)


async def _run(graph: Any, config: dict[str, Any], outcome: ReplayOutcome) -> None:
    started = time.perf_counter()
    values: dict[str, Any] = {}
    try:
        async for mode, chunk in graph.astream(
            None, config, stream_mode=["updates", "checkpoints"]
        ):
            if mode == "updates":
                for node, update in chunk.items():
                    outcome.nodes.append(node)
                    update = update or {}
                    if "reply" in update:
                        outcome.reply = update["reply"]
                    if "tools_used" in update:
                        outcome.tools_used = list(update["tools_used"])
                    if "usage" in update:
                        outcome.usage = dict(update["usage"])
            else:
                outcome.last_checkpoint_id = chunk["config"]["configurable"]["checkpoint_id"]
                values = chunk["values"]
    except Exception as exc:  # the report says what failed; the rollback follows anyway
        outcome.error = f"{type(exc).__name__}: {exc}"
    outcome.ms = (time.perf_counter() - started) * 1000
    for message in reversed(values.get("messages") or []):
        if isinstance(message, AIMessage):
            outcome.model_seen = message.response_metadata.get("model_name")
            break


@dataclass
class _Target:
    """The checkpoint to replay from, the turn it belongs to, and what runs next."""

    thread_id: str
    checkpoint_id: str
    saved: CheckpointTuple
    next_nodes: list[str]
    recorded: Turn | None
    turn_index: int | None


async def _find_target(
    reader: CheckpointReader, settings: Settings, thread: str, checkpoint: str
) -> _Target:
    """Resolve the ids, read the checkpoint, and refuse what cannot be replayed."""
    thread_id = await reader.resolve_thread(thread)
    checkpoint_id = await reader.resolve_checkpoint(thread_id, checkpoint)
    turns = await reader.turns(thread_id)
    recorded = turn_containing(turns, checkpoint_id)
    if recorded is not None:
        await reader.load_values(recorded)
    saved = await reader.tuple(thread_id, checkpoint_id)
    probe = offline_graph(settings, checkpointer=reader.saver)
    check_compatible(probe, saved)
    state = await probe.aget_state(saved.config)
    check_context(saved, state.next)
    if not state.next:
        hint = (
            f" Replay the whole turn: --checkpoint {recorded.head.checkpoint_id}"
            if recorded
            else ""
        )
        raise DevtoolsError(
            f"checkpoint {checkpoint_id} is where its turn ended: nothing runs after it.{hint}",
            EXIT_BAD_INPUT,
        )
    index = turns.index(recorded) + 1 if recorded else None
    return _Target(thread_id, checkpoint_id, saved, list(state.next), recorded, index)


async def replay(
    pool: AsyncConnectionPool[Any],
    settings: Settings,
    thread: str,
    checkpoint: str,
    model: str | None = None,
    commit: bool = False,
    chat_model: BaseChatModel | None = None,
    live_tools: bool = False,
) -> ReplayOutcome:
    """Re-run the graph from a checkpoint; see the module docstring for what is written
    and what MCP tools do (`live_tools`: call them)."""
    reader = CheckpointReader(pool)
    target = await _find_target(reader, settings, thread, checkpoint)
    try:
        conversation_id = uuid.UUID(target.thread_id)
    except ValueError:
        raise DevtoolsError(f"thread {target.thread_id} is not a tgagent conversation id") from None
    # The model given, else the one the turn started with (the owner's /model choice),
    # as if it were LLM_MODEL: its context limit and token counting too.
    chosen = target.recorded.input.get("model") if target.recorded is not None else None
    settings = settings.model_copy(update={"llm_model": model or chosen or settings.llm_model})
    chat = chat_model or make_chat_model(settings)
    outcome = ReplayOutcome(
        thread_id=target.thread_id,
        checkpoint_id=target.checkpoint_id,
        next_nodes=target.next_nodes,
        recorded=target.recorded,
        turn_index=target.turn_index,
        model=settings.llm_model,
        committed=commit,
        kept_messages_upto=messages_kept(dict(target.saved.checkpoint["channel_values"])),
    )
    owner_id = await _owner_of(pool, conversation_id)
    conn = await connect_like(pool)
    try:
        await copy_owner(conn, owner_id)
        await _run_on_copy(conn, reader, settings, chat, target, outcome, commit, live_tools)
    finally:
        await conn.close()  # the copies go with it
    return outcome


async def _run_on_copy(
    conn: AsyncConnection[Any],
    reader: CheckpointReader,
    settings: Settings,
    chat: BaseChatModel,
    target: _Target,
    outcome: ReplayOutcome,
    commit: bool,
    live_tools: bool = False,
) -> None:
    """Rewind the copy to the checkpoint and run the graph over it, then roll back."""
    conversation_id = uuid.UUID(target.thread_id)
    async with conn.transaction(force_rollback=True):
        outcome.hidden_messages = await _rewind(conn, conversation_id, outcome.kept_messages_upto)
        sandbox = cast(Any, SandboxPool(conn))
        deps = make_deps(settings, sandbox, chat_model=chat)
        deps.tasks_run = True  # as in the bot: the task and its job are rolled back
        # The recorded calls are read from the copy of the owner's rows.
        record = None if live_tools else McpCallRepository(sandbox)
        deps.mcp = await start_mcp(settings, record, replaying=not live_tools)
        try:
            await _run_graph(deps, reader, settings, target, outcome, commit)
        finally:
            if deps.mcp is not None:
                await deps.mcp.close()


async def _run_graph(
    deps: GraphDeps,
    reader: CheckpointReader,
    settings: Settings,
    target: _Target,
    outcome: ReplayOutcome,
    commit: bool,
) -> None:
    """Fork the checkpoint (in memory, or in the thread with `commit`) and run from it."""
    saver: BaseCheckpointSaver[Any] = reader.saver if commit else _MemorySaver()
    config = (
        target.saved.config
        if commit
        else await _copy_into_memory(cast(InMemorySaver, saver), target.saved)
    )
    graph = build_graph(deps, checkpointer=saver)
    fork = await graph.aupdate_state(config, None, as_node="__copy__")
    outcome.fork_id = fork["configurable"]["checkpoint_id"]
    run_config = {
        "configurable": dict(fork["configurable"], model=settings.llm_model),
        "metadata": {"replay_of": target.checkpoint_id, "replay_model": settings.llm_model},
        "run_name": "replay",
    }
    await _run(graph, run_config, outcome)
