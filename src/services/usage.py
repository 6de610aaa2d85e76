"""Record every model call (issue 18): a LangChain callback on every chat model, and
direct records for embeddings and transcriptions.

Tokens come from the endpoint's `usage` (streams too: `stream_usage=True`); when it
reports none they are counted with the project's token counter and marked `estimated`.
A call cancelled under way (memory work that gives way, a shutdown) is billed by the
provider all the same: it is recorded as an error, its prompt counted and its answer so
far, estimated.
Records are written in the background, one cheap INSERT each: a failed write is logged,
never raised into the call that was recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from psycopg_pool import AsyncConnectionPool

from src.config import Settings
from src.graph.model_calls import ambient_metadata, purpose_of
from src.graph.tokens import TokenCounter, count_messages, message_text
from src.services.budget import Budget, BudgetGuard
from src.storage.usage_repo import CallRecord, UsageRepository

logger = logging.getLogger(__name__)

Model = TypeVar("Model", bound=BaseChatModel)


@dataclass
class _Started:
    """A chat model call under way: what the record needs from its start."""

    at: float
    metadata: dict[str, Any]
    model: str
    messages: Sequence[BaseMessage]
    task: asyncio.Task[Any] | None = None
    """The task that made the call: its end records the call if nothing else did (a
    cancelled `ainvoke` tells its callbacks nothing)."""
    watch: Callable[[asyncio.Task[Any]], None] | None = None
    """The task's done-callback that does it."""


def _usage_of(response: LLMResult) -> tuple[int, int, int] | None:
    """Return (input, cached, output) tokens the endpoint reported, or None."""
    for generations in response.generations:
        for generation in generations:
            message = generation.message if isinstance(generation, ChatGeneration) else None
            usage = message.usage_metadata if isinstance(message, AIMessage) else None
            if usage:
                cached = (usage.get("input_token_details") or {}).get("cache_read") or 0
                return usage["input_tokens"], int(cached), usage["output_tokens"]
    token_usage = (response.llm_output or {}).get("token_usage") or {}
    if "prompt_tokens" not in token_usage:
        return None
    details = token_usage.get("prompt_tokens_details") or {}
    return (
        int(token_usage["prompt_tokens"]),
        int(details.get("cached_tokens") or 0),
        int(token_usage.get("completion_tokens") or 0),
    )


def _output_text(response: LLMResult | None) -> str:
    """Return what the model wrote (text and tool calls' arguments), for estimates."""
    parts: list[str] = []
    for generations in response.generations if response is not None else []:
        for generation in generations:
            message = generation.message if isinstance(generation, ChatGeneration) else None
            if isinstance(message, AIMessage):
                parts.append(message_text(message))
    return "\n".join(p for p in parts if p)


class UsageRecorder(AsyncCallbackHandler):
    """Store one `llm_calls` row per model call; attach it to every chat model.

    Its start asks the budget's guard first: a call the guard refuses is never made, so
    never recorded. The guard's refusal is the one error it raises (LangChain re-raises
    the errors of `raise_error` handlers); its own failures are logged.
    """

    # Inline: the start runs in the calling task, whose end it watches (see _Started).
    run_inline = True
    raise_error = True

    def __init__(
        self, repo: UsageRepository, counter: TokenCounter, guard: BudgetGuard | None = None
    ) -> None:
        self.repo = repo
        self.counter = counter
        self.guard = guard
        self._started: dict[uuid.UUID, _Started] = {}
        self._writes: dict[asyncio.Task[None], CallRecord] = {}
        self._held: dict[str, list[CallRecord]] = {}
        """Records of turns whose reply is not out yet, by turn id (see `holding`)."""

    # --- chat models (LangChain callbacks) -------------------------------------------

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Refuse a call over budget; else note when it started, whose it is, and its
        prompt (for an estimate)."""
        if self.guard is not None:
            await self.guard.check(metadata)
        metadata = dict(metadata or {})
        params = kwargs.get("invocation_params") or {}
        model = str(metadata.get("ls_model_name") or params.get("model") or "unknown")
        prompt = messages[0] if messages else []
        started = _Started(time.perf_counter(), metadata, model, prompt)
        started.task = asyncio.current_task()
        if started.task is not None:
            started.watch = functools.partial(self._task_ended, run_id)
            started.task.add_done_callback(started.watch)
        self._started[run_id] = started

    async def on_llm_end(self, response: LLMResult, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        """Record a finished call with the endpoint's usage (or an estimate)."""
        started = self._finished(run_id)
        if started is not None:
            self._write_safely(started, response, None)

    async def on_llm_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        """Record a failed call: no tokens, unless a stream wrote some before it ended
        (a stopped answer is paid for up to where it stopped: estimated), or it was
        cancelled (its prompt was sent: estimated)."""
        started = self._finished(run_id)
        if started is not None:
            self._write_safely(started, kwargs.get("response"), error)

    def _finished(self, run_id: uuid.UUID) -> _Started | None:
        """Forget a call under way (and stop watching its task); return its start."""
        started = self._started.pop(run_id, None)
        if started is not None and started.task is not None and started.watch is not None:
            started.task.remove_done_callback(started.watch)
        return started

    def _task_ended(self, run_id: uuid.UUID, task: asyncio.Task[Any]) -> None:
        """Record a call whose task was cancelled while it waited for the endpoint:
        nothing else will, and its prompt would stay here. (A task that ended well may
        have started a stream another task reads on: its end says nothing.)"""
        if task.cancelled() and run_id in self._started:
            started = self._started.pop(run_id)
            self._write(self._record(started, None, asyncio.CancelledError()))

    def _write_safely(
        self, started: _Started, response: LLMResult | None, error: BaseException | None
    ) -> None:
        """Record a call; a failure here is logged, never raised into the call."""
        try:
            self._write(self._record(started, response, error))
        except Exception:
            logger.warning("recording a call of %s failed", started.model, exc_info=True)

    def _record(
        self, started: _Started, response: LLMResult | None, error: BaseException | None
    ) -> CallRecord:
        meta = started.metadata
        record = CallRecord(
            purpose=purpose_of(meta),
            model=started.model,
            owner_id=_int_or_none(meta.get("owner_id")),
            sender_id=_int_or_none(meta.get("sender_id")),
            conversation_id=meta.get("conversation_id"),
            turn_id=meta.get("turn_id"),
            latency_ms=(time.perf_counter() - started.at) * 1000,
        )
        usage = _usage_of(response) if response is not None else None
        cancelled = isinstance(error, asyncio.CancelledError)
        if usage is not None:
            record.input_tokens, record.cached_tokens, record.output_tokens = usage
        elif error is None or cancelled or _output_text(response):
            record.input_tokens = count_messages(started.messages, self.counter)
            record.output_tokens = self.counter.count(_output_text(response))
            record.estimated = True
        if error is not None:
            record.status, record.error_class = "error", error_class(error)
        return record

    # --- other calls (embeddings, transcriptions) ---------------------------------------

    def record(self, record: CallRecord) -> None:
        """Store a call made without a chat model; owner and turn default to those of
        the run it is made in (a tool of the turn graph)."""
        meta = ambient_metadata()
        if record.owner_id is None:
            record.owner_id = _int_or_none(meta.get("owner_id"))
            record.conversation_id = record.conversation_id or meta.get("conversation_id")
        if record.sender_id is None and record.owner_id == _int_or_none(meta.get("owner_id")):
            record.sender_id = _int_or_none(meta.get("sender_id"))
        record.turn_id = record.turn_id or meta.get("turn_id")
        self._write(record)

    def estimate(self, texts: Sequence[str]) -> int:
        """Return the tokens of `texts` by the project's counter."""
        return sum(self.counter.count(text) for text in texts)

    # --- writing --------------------------------------------------------------------------

    @contextlib.contextmanager
    def holding(self, turn_id: str) -> Iterator[None]:
        """Keep the records of turn `turn_id`'s calls until `release(turn_id)` (its reply
        is out) or the block's end: writing them is work for after the reply, not for
        the time the user waits for it."""
        self._held.setdefault(turn_id, [])
        try:
            yield
        finally:
            self.release(turn_id)

    def release(self, turn_id: str) -> None:
        """Write the turn's kept records, and from now on its records as they come."""
        for record in self._held.pop(turn_id, []):
            self._write(record)

    def _write(self, record: CallRecord) -> None:
        held = self._held.get(record.turn_id) if record.turn_id else None
        if held is not None:
            held.append(record)
            return
        task = asyncio.get_running_loop().create_task(self._store(record))
        self._writes[task] = record
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._writes.pop(task, None)

    def unwritten(self, person_id: int) -> list[CallRecord]:
        """Return the person's (or group's) records not stored yet: kept for a turn, or
        being written (budgets count them)."""
        pending = [*self._writes.values()]
        for held in self._held.values():
            pending += held
        return [r for r in pending if person_id in (r.owner_id, r.sender_id)]

    async def _store(self, record: CallRecord) -> None:
        try:
            await self.repo.add(record)
        except Exception:
            logger.warning(
                "recording a %s call of %s failed", record.purpose, record.owner_id, exc_info=True
            )

    async def drain(self) -> None:
        """Wait until every record so far is written (those kept for a turn too)."""
        for turn_id in list(self._held):
            self.release(turn_id)
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)


def error_class(error: BaseException) -> str:
    """Return the name of the error's class, as its client library calls it.

    langchain-openai re-raises the OpenAI client's errors as its own subclasses of them
    (`OpenAIAPIError` for an `InternalServerError`): the client's name says more.
    """
    for cls in type(error).__mro__:
        if not cls.__module__.startswith("langchain"):
            return cls.__name__
    return type(error).__name__


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


@dataclass
class Usage:
    """Usage accounting of one process: the calls' table, the recorder, the budgets."""

    repo: UsageRepository
    recorder: UsageRecorder
    budget: Budget

    @property
    def callbacks(self) -> list[BaseCallbackHandler]:
        """Return what every chat model carries: the recorder, which asks the budget's
        guard before every call."""
        return [self.recorder]

    @classmethod
    def over(
        cls,
        pool: AsyncConnectionPool[Any],
        settings: Settings,
        counter: TokenCounter,
        clock: Callable[[], datetime],
    ) -> Usage:
        """Build usage accounting over the pool."""
        repo = UsageRepository(pool)
        recorder = UsageRecorder(repo, counter)
        budget = Budget(repo, settings, clock, recorder.unwritten)
        recorder.guard = BudgetGuard(budget)
        return cls(repo, recorder, budget)


def recorded(model: Model | None, usage: Usage) -> Model | None:
    """Return `model` with the usage callbacks after its own (a copy; None stays None).

    Last, since the recorder may refuse the call: handlers after a raising one would
    never have their start awaited."""
    if model is None:
        return None
    callbacks = model.callbacks
    if isinstance(callbacks, list) and usage.recorder in callbacks:
        return model
    if callbacks is not None and not isinstance(callbacks, list):
        logger.warning("%s has a callback manager: its calls are recorded in turns only", model)
        return model
    return model.model_copy(update={"callbacks": [*(callbacks or []), *usage.callbacks]})
