"""The terminal chat's keyboard: the lines typed, and Ctrl+C.

Lines are read by a daemon thread as they come, so lines typed ahead wait in order and
the chat can tell that more are waiting (its answers then go before memory work), and
quitting never waits for a line that is not typed: a thread blocked reading is left
behind, where the default executor's would hold the process until Enter.

Ctrl+C stops the reply being written, as /stop does in Telegram (the part written is
the answer, kept and marked), and the chat goes on to the next prompt; Ctrl+C at the
prompt, or again while a stopped reply is ending, quits.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import TextIO, TypeVar

T = TypeVar("T")


class Lines:
    """The lines of `stdin`, read ahead in a daemon thread; "" at its end."""

    def __init__(self, stdin: TextIO) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._typed = 0
        reader = threading.Thread(target=self._read, args=(stdin,), name="chat-stdin", daemon=True)
        reader.start()

    def _read(self, stdin: TextIO) -> None:
        while True:
            try:
                line = stdin.readline()
            except (OSError, ValueError):  # closed under us: its end
                line = ""
            try:
                self._loop.call_soon_threadsafe(self._put, line)
            except RuntimeError:  # the loop is closed: nobody reads any more
                return
            if not line:
                return

    def _put(self, line: str) -> None:
        self._typed += bool(line)
        self._queue.put_nowait(line)

    async def next(self) -> str:
        """Return the next line typed (with its newline), or "" at the end of input."""
        line = await self._queue.get()
        self._typed -= bool(line)
        return line

    def waiting(self) -> int:
        """Return how many lines were typed and not read yet."""
        return self._typed


class Keys:
    """Ctrl+C in the chat (`interrupt`, the SIGINT handler): stop the reply, or quit."""

    def __init__(self) -> None:
        self.quit = asyncio.Event()
        """Set when the chat is to end."""
        self.reply: asyncio.Event | None = None
        """The stop of the reply being written (its TurnStream's), while one is."""

    def interrupt(self) -> None:
        """Stop the reply being written; with none (at the prompt, or a stop already
        asked), quit."""
        if self.reply is not None and not self.reply.is_set():
            self.reply.set()
            return
        if self.reply is not None:
            self.reply.set()
        self.quit.set()

    async def until_quit(self, work: Awaitable[T]) -> T | None:
        """Return what `work` gives, or None when the chat is to end first (the work is
        cancelled then: a turn goes on without its caller, stopped, and is stored)."""
        task = asyncio.ensure_future(work)
        quitting = asyncio.ensure_future(self.quit.wait())
        try:
            await asyncio.wait({task, quitting}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        finally:
            quitting.cancel()
        if task.done():
            return task.result()
        task.cancel()
        return None
