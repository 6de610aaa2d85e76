"""Compose the service from settings: pool, migrations, checkpointer, models, graph."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg_pool import AsyncConnectionPool

from src.config import Settings
from src.embeddings import make_embedder
from src.graph.deps import GraphDeps
from src.graph.main_graph import build_graph
from src.graph.memory.structured import JsonAnswers
from src.graph.tokens import make_counter
from src.services.agent_service import AgentService
from src.services.compaction import Compactor
from src.services.embedding_worker import EmbeddingWorker
from src.services.llm_service import (
    make_chat_model,
    make_compact_model,
    make_summary_model,
    model_configured,
)
from src.storage.conversation_repo import ConversationRepository
from src.storage.embedding_repo import EmbeddingRepository
from src.storage.memory_repo import MemoryRepository
from src.storage.migrations import migrate
from src.storage.pg_client import open_pool_from_settings
from src.storage.search_repo import SearchRepository
from src.storage.users_repo import UsersRepository


class PooledPostgresSaver(AsyncPostgresSaver):
    """AsyncPostgresSaver without its process-wide lock.

    The saver serializes every checkpoint read and write behind one asyncio lock, which
    only a single shared connection needs; over a pool each call takes a connection of
    its own, so concurrent conversations need not queue behind each other.
    """

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        super().__init__(pool)
        self.lock = contextlib.nullcontext()  # type: ignore[assignment]


@dataclass
class Runtime:
    """Everything a running tgagent holds: close it once at shutdown."""

    settings: Settings
    pool: AsyncConnectionPool[Any]
    checkpointer: PooledPostgresSaver
    deps: GraphDeps
    service: AgentService
    owns_pool: bool = True

    @property
    def embeddings(self) -> EmbeddingWorker | None:
        """The background embedding worker; None when semantic search is off."""
        return self.service.embeddings

    async def close(self) -> None:
        """Wait for background work, then close the pool if we opened it."""
        await self.service.drain()
        if self.embeddings is not None:
            await self.embeddings.close()
        if self.owns_pool:
            await self.pool.close()


def make_deps(
    settings: Settings,
    pool: AsyncConnectionPool[Any],
    chat_model: BaseChatModel | None = None,
    summary_model: BaseChatModel | None = None,
) -> GraphDeps:
    """Build the graph's dependencies over an open pool."""
    return GraphDeps(
        settings=settings,
        conversations=ConversationRepository(pool, settings.max_storage),
        users=UsersRepository(pool),
        memory=MemoryRepository(pool),
        search=SearchRepository(pool, settings.search_semantic_weight),
        embedder=make_embedder(settings),
        chat_model=chat_model or make_chat_model(settings),
        summary_model=summary_model or make_summary_model(settings),
        counter=make_counter(settings.llm_model, settings.token_counter),
        json_answers=JsonAnswers(enabled=settings.structured_output != "off"),
    )


async def build_runtime(
    settings: Settings,
    pool: AsyncConnectionPool[Any] | None = None,
    chat_model: BaseChatModel | None = None,
    summary_model: BaseChatModel | None = None,
) -> Runtime:
    """Open (or take) the pool, migrate, set up checkpoints, and build the service."""
    owns_pool = pool is None
    if pool is None:
        pool = await open_pool_from_settings(settings)
    try:
        await migrate(pool)
        checkpointer = PooledPostgresSaver(pool)
        await checkpointer.setup()
        deps = make_deps(settings, pool, chat_model, summary_model)
        graph = build_graph(deps, checkpointer=checkpointer)
        compact_model = (
            make_compact_model(settings) if model_configured(settings) else deps.summary_model
        )
        compactor = Compactor(deps, compact_model)
        embeddings = None
        if deps.embedder is not None:
            repo = EmbeddingRepository(pool)
            embeddings = EmbeddingWorker(repo, deps.embedder, settings.embedding_batch)
        service = AgentService(
            deps, graph, checkpointer=checkpointer, compactor=compactor, embeddings=embeddings
        )
    except BaseException:
        if owns_pool:
            await pool.close()
        raise
    return Runtime(settings, pool, checkpointer, deps, service, owns_pool)
