"""Replies first: memory model calls wait for idle time on a server that answers one at a time.

A local model server (llama.cpp, llama-cpp-python, Ollama, LM Studio) often serves one
request at a time and queues the rest. Memory work after a reply (folds ahead, fact
extraction, compacts, their retries and structured-output fallbacks) sent while the
owner's next message is on its way would be served first, and the answer would wait
for it. So, when MEMORY_WAITS_FOR_REPLIES holds (`auto`: the memory model is on this
machine or a private network), every memory model call first waits until no reply is
being made in this process (a turn between its start and its answer, or lines typed
ahead in the terminal chat) and none was for MEMORY_IDLE_SECONDS. A fold the turn needs
for its own prompt is part of the answer and does not wait (`urgent`).

Every memory call is bounded as well: by its output cap (its kind's, at most
MEMORY_MAX_OUTPUT_TOKENS) and by MEMORY_CALL_SECONDS, retries included, counted from
when it is sent. A call cut by its time bound fails like a timeout: retried later.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ipaddress
import socket
import time
from collections.abc import Callable, Hashable, Iterator
from urllib.parse import urlsplit

from src.config import Settings

# How often a waiting memory call looks again whether the replies are over.
POLL = 0.05

# Set in the context of a fold the turn waits for (it is part of the answer).
_URGENT: contextvars.ContextVar[bool] = contextvars.ContextVar("tgagent_urgent", default=False)
# The memory work (its Runs key) whose calls are made in this context.
_WORK: contextvars.ContextVar[Hashable] = contextvars.ContextVar("tgagent_work", default=None)


def mark_work(key: Hashable) -> None:
    """Say in the current context (a task's, as it is created) that its model calls are
    memory work `key`: the gate can tell whether that work waits (`ReplyGate.holds`)."""
    _WORK.set(key)


@contextlib.contextmanager
def urgent() -> Iterator[None]:
    """Let the memory calls started inside (tasks created inside too) go at once."""
    token = _URGENT.set(True)
    try:
        yield
    finally:
        _URGENT.reset(token)


def is_local(base_url: str | None) -> bool:
    """Tell whether a model endpoint is on this machine or a private network (a local
    server, which may answer one request at a time); None (OpenAI's own) is not."""
    host = urlsplit(base_url or "").hostname
    if not host:
        return False
    if host == "localhost" or host.endswith((".local", ".internal", ".lan")):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "." not in host or host == socket.gethostname()  # a bare name: this network
    return address.is_loopback or address.is_private or address.is_link_local


def gate_for(settings: Settings) -> ReplyGate:
    """Return the gate of the memory calls that `settings` configure."""
    mode = settings.memory_waits_for_replies
    base = settings.openai_base_url
    return ReplyGate(
        enabled=mode == "always" or (mode == "auto" and is_local(base)),
        quiet=settings.memory_idle_seconds,
        call_seconds=settings.memory_call_seconds,
        max_output_tokens=settings.memory_max_output_tokens,
    )


class ReplyGate:
    """Whether replies are being made in this process; memory calls wait until none are."""

    def __init__(
        self,
        enabled: bool = False,
        quiet: float = 0.5,
        call_seconds: float | None = None,
        max_output_tokens: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        """False: memory calls never wait (a server that answers many at once)."""
        self.quiet = quiet
        """Seconds without a reply before memory calls go."""
        self.call_seconds = call_seconds
        """The time bound of one memory call, retries included (None: none)."""
        self.max_output_tokens = max_output_tokens
        """The output cap of every memory call, above its kind's own (None: its own)."""
        self.clock = clock
        self._busy = 0
        self._expected = False
        self._since = clock() - quiet
        self._waiting: dict[Hashable, int] = {}

    @contextlib.contextmanager
    def replying(self) -> Iterator[None]:
        """Mark a reply being made (or one on its way) for the duration of the block."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1
            self._since = self.clock()

    def expecting(self, more: bool) -> None:
        """Say whether more replies are on their way (lines typed ahead in the terminal
        chat): memory calls wait meanwhile."""
        if self._expected and not more:
            self._since = self.clock()
        self._expected = more

    def idle(self) -> bool:
        """Tell whether a memory call may go now."""
        busy = self._busy or self._expected
        return not busy and self.clock() - self._since >= self.quiet

    async def wait(self) -> None:
        """Return when a memory call may go: at once unless enabled, or urgent."""
        if not self.enabled or _URGENT.get():
            return
        work = _WORK.get()
        self._waiting[work] = self._waiting.get(work, 0) + 1
        try:
            while not self.idle():
                left = self.quiet - (self.clock() - self._since)
                busy = self._busy or self._expected
                await asyncio.sleep(POLL if busy else max(POLL, left))
        finally:
            self._waiting[work] -= 1
            if not self._waiting[work]:
                del self._waiting[work]

    def holds(self, work: Hashable) -> bool:
        """Tell whether a call of memory work `work` (its Runs key; None: calls made
        outside such work) waits here now: cancelling the work loses no answer then."""
        return work in self._waiting
