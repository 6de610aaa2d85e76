"""What the graph needs from outside, injected once by whoever builds it."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import numpy as np
from langchain_core.language_models import BaseChatModel

from src.config import Settings
from src.graph.mcp.tools import McpTools
from src.graph.memory.errors import is_outage
from src.graph.memory.folds import Backoff, Runs
from src.graph.memory.idle import ReplyGate
from src.graph.memory.structured import JsonAnswers, endpoint_of
from src.graph.tokens import ApproxCounter, TokenCounter
from src.storage.conversation_repo import ConversationRepository
from src.storage.delivery_repo import DeliveryRepository
from src.storage.memory_repo import MemoryRepository
from src.storage.search_repo import SearchRepository
from src.storage.users_repo import UsersRepository


def utc_now() -> datetime:
    """Return the current time, aware, in UTC."""
    return datetime.now(UTC)


class Embedder(Protocol):
    """Turns text into unit vectors; `model` names the vectors it makes."""

    model: str
    """Stored with every vector: vectors of different models are never compared."""

    async def passages(self, texts: list[str]) -> np.ndarray:
        """Return one unit vector per text (stored messages), shape (len(texts), dims)."""
        ...

    async def query(self, text: str) -> np.ndarray:
        """Return the unit vector of a search query, shape (dims,)."""
        ...


class BudgetCheck(Protocol):
    """Whether an owner's token budget lets background work call models now."""

    async def allows(self, owner_id: int) -> bool:
        """Tell whether the owner is within USER_DAILY_TOKENS and USER_MONTHLY_TOKENS."""
        ...

    def forget_zone(self, person_id: int) -> None:
        """Read the person's time zone again (they changed it: budget days are theirs)."""
        ...


@dataclass
class GraphDeps:
    """Repositories, models, clock and settings the nodes and tools use."""

    settings: Settings
    conversations: ConversationRepository
    users: UsersRepository
    memory: MemoryRepository
    search: SearchRepository
    chat_model: BaseChatModel
    summary_model: BaseChatModel
    models: Callable[[str], BaseChatModel] | None = None
    """Chat models by name: a user's /model choice, FALLBACK_MODEL. None: `chat_model`
    answers whatever the name (a model injected by tests or a replay)."""
    embedder: Embedder | None = None
    """Embeds search queries; None when semantic search is off."""
    clock: Callable[[], datetime] = utc_now
    counter: TokenCounter = field(default_factory=ApproxCounter)
    json_answers: JsonAnswers = field(default_factory=JsonAnswers)
    mcp: McpTools | None = None
    """Tools of the operator's MCP servers (MCP_CONFIG), started; None: none configured."""
    budget: BudgetCheck | None = None
    """Token budgets: the summary and facts after a reply wait while the owner is over
    budget. None: no budgets."""
    runs: Runs = field(default_factory=Runs)
    """Memory work (summary folds, fact extraction) running in this process: one per
    conversation, outliving the turn that started it (see src/graph/memory/folds.py)."""
    backoff: Backoff = field(default_factory=Backoff)
    """When memory work may be tried again after a transient failure."""
    stops: dict[int, asyncio.Event] = field(default_factory=dict)
    """The stop signals of this process's live turns, by owner (/stop sets one): the
    agent node streams the model's answer of such a turn and ends it when it is set."""
    replies: ReplyGate = field(default_factory=ReplyGate)
    """Whether replies are being made: memory model calls wait for idle time
    (src/graph/memory/idle.py); the memory models made from settings hold it."""
    tasks_run: bool = False
    """Whether scheduled tasks reach the user from here: the bot and its workers run them
    and deliver their answers in Telegram; the terminal chat runs none, so schedule_task
    refuses there rather than promise a reminder that never comes."""

    def __post_init__(self) -> None:
        self.backoff.base = self.settings.memory_retry_seconds

    def memory_failed(self, key: Hashable, exc: BaseException) -> float:
        """Record a transient failure of memory work `key`; return the seconds until the
        next try. An outage of the memory model's endpoint ends when it answers again."""
        endpoint = endpoint_of(self.summary_model)[0] if is_outage(exc) else None
        return self.backoff.failed(key, endpoint)

    def endpoint_answered(self, model: BaseChatModel) -> None:
        """Note that `model` answered: memory work waiting for its endpoint is due now."""
        self.backoff.endpoint_up(endpoint_of(model)[0])

    def chat_model_named(self, name: str | None) -> BaseChatModel:
        """Return the chat model called `name` (LLM_MODEL's is `chat_model`)."""
        if not name or name == self.settings.llm_model or self.models is None:
            return self.chat_model
        return self.models(name)

    @functools.cached_property
    def delivery(self) -> DeliveryRepository:
        """The inbox and outbox, over the same pool (save_response stores replies there)."""
        return DeliveryRepository(self.conversations.pool)
