"""The two systems the turn bench drives, behind one small interface.

`Ours` is tgagent as deployed: `build_runtime` over the pool (migrations, AsyncPostgresSaver,
ChatOpenAI, the graph, AgentService). `Baseline` is LangGraph's prebuilt ReAct agent with
AsyncPostgresSaver keeping the whole message list, trimmed by `trim_messages` before each
model call to the same input budget, with the same system prompt and tool schemas.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, trim_messages
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from src.config import Settings
from src.graph import prompts
from src.graph.context.budget import Layers
from src.graph.main_graph import make_tools
from src.graph.timestamps import stamp
from src.graph.tokens import TokenCounter, count_messages
from src.services.agent_service import Identity
from src.services.embeddings import LocalEmbedder
from src.services.factory import Runtime, build_runtime, make_deps
from src.services.llm_service import make_chat_model

COPY_MESSAGES = """
COPY messages (
    conversation_id, number, role, content, created_at, summarized, facts_extracted, embedded
)
FROM STDIN
"""
SEED_CONVERSATION = """
UPDATE conversations SET next_message_number = %s, summary = %s,
    last_message_at = (SELECT max(created_at) FROM messages WHERE conversation_id = %s)
WHERE id = %s
"""
# Large seeds load faster into a bare table: secondary indexes and the foreign key are
# dropped for the COPY and rebuilt from their own definitions afterwards.
SELECT_INDEXES = """
SELECT i.indexname AS name, i.indexdef AS definition FROM pg_indexes i
WHERE i.schemaname = current_schema() AND i.tablename = 'messages'
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                  WHERE c.conrelid = 'messages'::regclass AND c.conname = i.indexname)
"""
SELECT_FOREIGN_KEYS = """
SELECT conname AS name, pg_get_constraintdef(oid) AS definition FROM pg_constraint
WHERE conrelid = 'messages'::regclass AND contype = 'f'
"""
BARE_LOAD_FROM = 100_000
COUNT_TURN_MESSAGES = """
SELECT count(*) AS n FROM messages m JOIN conversations c ON c.id = m.conversation_id
WHERE c.telegram_user_id = %s AND m.role IN ('user', 'assistant')
"""
SEED_SUMMARY = (
    "The user is planning a move to another city for a new job and asks for help with "
    "the plan, budget and paperwork; they prefer short answers and checklists. "
) * 3
SEED_START = datetime(2020, 1, 1, tzinfo=UTC)


def seed_texts(number: int) -> tuple[str, str]:
    """Return (role, content) of the `number`-th seeded message: short chat lines."""
    if number % 2:
        return "user", f"[Текущее время: 2020-01-01 10:00] вопрос {number}: что дальше по плану?"
    return "assistant", f"ответ {number}: " + "Разбейте день на блоки и начните с главного. " * 3


class Subject(Protocol):
    """What a phase of the bench needs from a system under test."""

    name: str

    async def turn(self, conv: int, text: str) -> tuple[bool, str]:
        """Run one user turn in conversation `conv`; return (ok, reply)."""

    async def settle(self) -> None:
        """Wait for work the turn left running in the background."""

    async def stored(self, conv: int) -> int:
        """Return how many user and assistant messages conversation `conv` holds."""

    async def seed(self, conv: int, count: int) -> None:
        """Give conversation `conv` `count` earlier messages, written in bulk."""

    def embedding_cpu(self) -> float:
        """Return the CPU seconds spent so far embedding stored messages."""

    async def close(self) -> None:
        """Release what the subject holds (not the pool)."""


class Ours:
    """tgagent: AgentService over the graph, repositories and checkpointer."""

    name = "tgagent"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.service = runtime.service

    @classmethod
    async def open(cls, settings: Settings, pool: AsyncConnectionPool[Any]) -> Ours:
        return cls(await build_runtime(settings, pool=pool))

    async def turn(self, conv: int, text: str) -> tuple[bool, str]:
        result = await self.service.handle_message(Identity(conv), text)
        return result.ok, result.reply

    async def settle(self) -> None:
        # The turn's work after the reply: summary and facts, then the embeddings of its
        # messages (a user's next message comes after it; the bench's comes right away).
        await self.service.drain()
        if self.runtime.embeddings is not None:
            await self.runtime.embeddings.drain()

    def embedding_cpu(self) -> float:
        # The local model counts its own CPU; an endpoint's is spent elsewhere.
        embedder = self.runtime.deps.embedder
        return embedder.passage_cpu if isinstance(embedder, LocalEmbedder) else 0.0

    async def stored(self, conv: int) -> int:
        async with self.runtime.pool.connection() as conn:
            row = await (await conn.execute(COUNT_TURN_MESSAGES, (conv,))).fetchone()
        return int(row["n"]) if row else 0

    async def seed(self, conv: int, count: int) -> None:
        """COPY `count` messages, then set the numbering and a summary reaching the window."""
        repo = self.runtime.deps.conversations
        await self.runtime.deps.users.get_or_create(conv)
        conversation_id = await repo.get_or_create_conversation(conv)
        async with self.runtime.pool.connection() as conn:
            # Steady state: the running summary and the facts cover all but the window.
            upto = max(0, count - self.runtime.settings.max_context)
            async with _bare_messages_table(conn, count >= BARE_LOAD_FROM):
                async with conn.cursor() as cur, cur.copy(COPY_MESSAGES) as copy:
                    for chunk in _copy_chunks(conversation_id, count, upto):
                        await copy.write(chunk)
            await conn.execute(
                SEED_CONVERSATION, (count + 1, SEED_SUMMARY, conversation_id, conversation_id)
            )
            if count >= BARE_LOAD_FROM:
                await conn.execute("ANALYZE messages")

    async def close(self) -> None:
        # Background work, the embedding worker too, ends before the bench closes the pool.
        await self.runtime.close()


@asynccontextmanager
async def _bare_messages_table(conn: Any, bare: bool) -> AsyncIterator[None]:
    """Drop the messages table's secondary indexes and foreign keys, rebuild them after."""
    if not bare:
        yield
        return
    indexes = await (await conn.execute(SELECT_INDEXES)).fetchall()
    keys = await (await conn.execute(SELECT_FOREIGN_KEYS)).fetchall()
    for index in indexes:
        await conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(index["name"])))
    for key in keys:
        await conn.execute(
            sql.SQL("ALTER TABLE messages DROP CONSTRAINT {}").format(sql.Identifier(key["name"]))
        )
    try:
        yield
    finally:
        async with conn.transaction():
            # The full-text (GIN) index builds several times faster with more memory.
            await conn.execute("SET LOCAL maintenance_work_mem = '256MB'")
            for index in indexes:
                await conn.execute(index["definition"].encode())
            for key in keys:
                await conn.execute(
                    sql.SQL("ALTER TABLE messages ADD CONSTRAINT {} {}").format(
                        sql.Identifier(key["name"]), sql.SQL(key["definition"])
                    )
                )


def _copy_chunks(
    conversation_id: uuid.UUID, count: int, upto: int, rows: int = 20_000
) -> Iterator[bytes]:
    lines: list[str] = []
    for n in range(1, count + 1):
        role, content = seed_texts(n)
        when = (SEED_START + timedelta(seconds=n)).isoformat()
        done = "t" if n <= upto else "f"
        # Steady state: embedded too (the background worker does not churn through the
        # seeded history while turns are measured; only the turns' own messages wait).
        lines.append(f"{conversation_id}\t{n}\t{role}\t{content}\t{when}\t{done}\t{done}\tt\n")
        if len(lines) >= rows:
            yield "".join(lines).encode()
            lines.clear()
    if lines:
        yield "".join(lines).encode()


def baseline_tools(settings: Settings, pool: AsyncConnectionPool[Any]) -> list[BaseTool]:
    """Return stand-ins with our tools' names, descriptions and argument schemas.

    The instant model never calls tools; the schemas only keep request sizes equal.
    """

    async def unavailable(**_: Any) -> str:
        return "not available in the baseline"

    ours = make_tools(make_deps(settings, pool))
    return [
        StructuredTool.from_function(
            coroutine=unavailable,
            name=t.name,
            description=t.description,
            args_schema=t.tool_call_schema,
        )
        for t in ours
    ]


class Baseline:
    """LangGraph's prebuilt ReAct agent with the full message list in its checkpoints."""

    name = "langgraph-react"

    def __init__(self, graph: Any, settings: Settings) -> None:
        self.graph = graph
        self.settings = settings

    @classmethod
    async def open(
        cls, settings: Settings, pool: AsyncConnectionPool[Any], counter: TokenCounter
    ) -> Baseline:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from langgraph.prebuilt import create_react_agent

        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        system = prompts.SYSTEM_PROMPT
        budget = Layers.for_model(settings, settings.llm_model).total
        budget -= count_messages([HumanMessage(system)], counter)

        def count(messages: list[BaseMessage]) -> int:
            return count_messages(messages, counter)

        def trim(state: dict[str, Any]) -> dict[str, Any]:
            kept = trim_messages(
                state["messages"],
                max_tokens=budget,
                token_counter=count,
                strategy="last",
                start_on="human",
                allow_partial=False,
            )
            return {"llm_input_messages": kept}

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = create_react_agent(
                make_chat_model(settings),
                baseline_tools(settings, pool),
                prompt=system,
                checkpointer=saver,
                pre_model_hook=trim,
            )
        return cls(graph, settings)

    def _config(self, conv: int) -> dict[str, Any]:
        return {"configurable": {"thread_id": f"baseline-{conv}"}}

    async def turn(self, conv: int, text: str) -> tuple[bool, str]:
        message = HumanMessage(stamp(text, datetime.now(UTC), self.settings))
        try:
            state = await self.graph.ainvoke({"messages": [message]}, self._config(conv))
        except Exception as exc:  # counted as a failed turn, like ours
            return False, f"{type(exc).__name__}: {exc}"
        answer = state["messages"][-1]
        return isinstance(answer, AIMessage) and bool(answer.text), answer.text

    async def settle(self) -> None:
        return None

    def embedding_cpu(self) -> float:
        return 0.0  # it has no search

    async def stored(self, conv: int) -> int:
        state = await self.graph.aget_state(self._config(conv))
        messages = state.values.get("messages", []) if state else []
        return sum(isinstance(m, HumanMessage | AIMessage) for m in messages)

    async def seed(self, conv: int, count: int) -> None:
        """Write `count` earlier messages into the thread's state in one update."""
        messages: list[BaseMessage] = []
        for n in range(1, count + 1):
            role, content = seed_texts(n)
            kind = HumanMessage if role == "user" else AIMessage
            messages.append(kind(content, id=str(uuid.uuid4())))
        await self.graph.aupdate_state(self._config(conv), {"messages": messages}, as_node="agent")

    async def close(self) -> None:
        return None
