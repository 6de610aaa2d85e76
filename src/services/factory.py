"""Compose the service from settings: pool, migrations, checkpointer, models, graph."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from functools import partial
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from psycopg_pool import AsyncConnectionPool

from src.config import Settings
from src.graph.deps import GraphDeps, utc_now
from src.graph.lang import set_default_language
from src.graph.main_graph import build_graph
from src.graph.mcp.tools import McpTools, start_mcp
from src.graph.memory.idle import gate_for
from src.graph.memory.structured import JsonAnswers
from src.graph.tokens import make_counter
from src.services.agent_service import AgentService
from src.services.compaction import Compactor
from src.services.embedding_worker import EmbeddingWorker
from src.services.embeddings import make_embedder
from src.services.llm_service import (
    make_chat_model,
    make_compact_model,
    make_summary_model,
    model_configured,
)
from src.services.usage import Usage, recorded
from src.storage.checkpointer import PooledPostgresSaver
from src.storage.conversation_repo import ConversationRepository
from src.storage.embedding_repo import EmbeddingRepository
from src.storage.mcp_calls_repo import McpCallRepository
from src.storage.memory_repo import MemoryRepository
from src.storage.migrations import migrate
from src.storage.pg_client import open_pool_from_settings
from src.storage.search_repo import SearchRepository
from src.storage.users_repo import UsersRepository


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
        """Wait for background work, stop the MCP servers, then close the pool if we
        opened it."""
        await self.service.drain()
        if self.deps.mcp is not None:
            await self.deps.mcp.close()
        if self.embeddings is not None:
            await self.embeddings.close()
        if self.owns_pool:
            await self.pool.close()


def make_deps(
    settings: Settings,
    pool: AsyncConnectionPool[Any],
    chat_model: BaseChatModel | None = None,
    summary_model: BaseChatModel | None = None,
    usage: Usage | None = None,
) -> GraphDeps:
    """Build the graph's dependencies over an open pool; with `usage`, every model call
    is recorded (models given are recorded too) and budgets hold."""
    callbacks: list[BaseCallbackHandler] | None = None
    gate = gate_for(settings)
    if usage is not None:
        callbacks = usage.callbacks
        chat_model = recorded(chat_model, usage)
        summary_model = recorded(summary_model, usage)
    return GraphDeps(
        settings=settings,
        conversations=ConversationRepository(pool, settings.max_storage),
        users=UsersRepository(pool),
        memory=MemoryRepository(pool),
        search=SearchRepository(pool, settings.search_semantic_weight),
        embedder=make_embedder(settings, usage.recorder if usage is not None else None),
        chat_model=chat_model or make_chat_model(settings, callbacks=callbacks),
        summary_model=summary_model or make_summary_model(settings, callbacks, gate),
        models=None
        if chat_model
        else functools.cache(partial(make_chat_model, settings, callbacks=callbacks)),
        budget=usage.budget if usage is not None else None,
        counter=(
            usage.recorder.counter
            if usage is not None
            else make_counter(settings.llm_model, settings.token_counter)
        ),
        json_answers=JsonAnswers(enabled=settings.structured_output != "off"),
        replies=gate,
    )


async def build_runtime(
    settings: Settings,
    pool: AsyncConnectionPool[Any] | None = None,
    chat_model: BaseChatModel | None = None,
    summary_model: BaseChatModel | None = None,
) -> Runtime:
    """Open (or take) the pool, migrate, set up checkpoints, and build the service."""
    set_default_language(settings.default_language)
    owns_pool = pool is None
    mcp: McpTools | None = None
    if pool is None:
        pool = await open_pool_from_settings(settings)
    try:
        if settings.windows is None and model_configured(settings):
            from src.services.window_probe import ask_windows

            # The models' windows, asked of their server (or remembered) before the
            # models are made: each learns its window from a refusal into the same book.
            await asyncio.to_thread(ask_windows, settings)
        await migrate(pool)
        checkpointer = PooledPostgresSaver(pool)
        await checkpointer.setup()
        counter = make_counter(settings.llm_model, settings.token_counter)
        usage = Usage.over(pool, settings, counter, utc_now)
        deps = make_deps(settings, pool, chat_model, summary_model, usage)
        deps.mcp = mcp = await start_mcp(settings, McpCallRepository(pool))
        graph = build_graph(deps, checkpointer=checkpointer)
        compact_model = (
            make_compact_model(settings, usage.callbacks, deps.replies)
            if model_configured(settings)
            else deps.summary_model
        )
        compactor = Compactor(deps, compact_model)
        embeddings = None
        if deps.embedder is not None:
            repo = EmbeddingRepository(pool)
            embeddings = EmbeddingWorker(repo, deps.embedder, settings.embedding_batch)
        service = AgentService(
            deps,
            graph,
            checkpointer=checkpointer,
            compactor=compactor,
            embeddings=embeddings,
            usage=usage,
        )
    except BaseException:
        if mcp is not None:
            await mcp.close()
        if owns_pool:
            await pool.close()
        raise
    return Runtime(settings, pool, checkpointer, deps, service, owns_pool)
