"""What the graph needs from outside, injected once by whoever builds it."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from langchain_core.language_models import BaseChatModel

from src.config import Settings
from src.embeddings import Embedder
from src.graph.memory.structured import JsonAnswers
from src.graph.tokens import ApproxCounter, TokenCounter
from src.storage.conversation_repo import ConversationRepository
from src.storage.delivery_repo import DeliveryRepository
from src.storage.memory_repo import MemoryRepository
from src.storage.search_repo import SearchRepository
from src.storage.users_repo import UsersRepository


def utc_now() -> datetime:
    """Return the current time, aware, in UTC."""
    return datetime.now(UTC)


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
    embedder: Embedder | None = None
    """Embeds search queries; None when semantic search is off."""
    clock: Callable[[], datetime] = utc_now
    counter: TokenCounter = field(default_factory=ApproxCounter)
    json_answers: JsonAnswers = field(default_factory=JsonAnswers)
    stops: dict[int, asyncio.Event] = field(default_factory=dict)
    """The stop signals of this process's live turns, by owner (/stop sets one): the
    agent node streams the model's answer of such a turn and ends it when it is set."""

    @functools.cached_property
    def delivery(self) -> DeliveryRepository:
        """The inbox and outbox, over the same pool (save_response stores replies there)."""
        return DeliveryRepository(self.conversations.pool)
