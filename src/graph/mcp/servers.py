"""The MCP servers of one process: each started once, restarted when it has died, stopped
with the process.

A server's session lives in a task of its own (the SDK's transports are entered and left
in one task): `McpServer.session()` starts it when it is not running and hands out the
live session; a call that finds the connection closed (the process died, the HTTP server
went away) marks it dead, and the next call starts it again. Sessions and transports are
langchain-mcp-adapters' and the `mcp` SDK's; nothing here speaks the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import anyio
from langchain_core.tools import BaseTool
from langchain_mcp_adapters.interceptors import ToolCallInterceptor
from langchain_mcp_adapters.sessions import create_session
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp import ClientSession
from mcp.shared.exceptions import McpError
from mcp.types import CONNECTION_CLOSED

from src.graph.mcp.config import ServerConfig

logger = logging.getLogger(__name__)

# How long a server may take to start and list its tools.
START_SECONDS = 30.0


class ServerDown(RuntimeError):
    """The server is not running and could not be started."""


# What the SDK's streamable HTTP client answers when the server no longer knows the
# session (it restarted: HTTP 404): the request was not run.
SESSION_GONE = 32600


def closed(exc: BaseException) -> bool:
    """Tell whether a call failed because the server's connection is gone (the request
    was never sent, or its answer can never come)."""
    if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError):
        return True
    return isinstance(exc, McpError) and exc.error.code in (CONNECTION_CLOSED, SESSION_GONE)


def unsent(exc: BaseException) -> bool:
    """Tell whether a call failed before the server ran it: the session's stream was
    closed already (the server died while idle), or the server did not know the session."""
    if isinstance(exc, anyio.ClosedResourceError):
        return True
    return isinstance(exc, McpError) and exc.error.code == SESSION_GONE


def leaf(exc: BaseException) -> BaseException:
    """Return the first error an exception group holds (the one that says what failed)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class McpServer:
    """One configured server and its running session."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.name = config.name
        self.tools: list[BaseTool] = []
        self.error: str | None = None
        """Why the server is not running (its start failed), or None."""
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._starting: asyncio.Lock | None = None
        self.starts = 0

    @property
    def running(self) -> bool:
        """Tell whether the session is up: its task runs and its connection is open (the
        SDK's session closes its write stream when the server's output ends, as when a
        stdio server's process dies)."""
        session, task = self._session, self._task
        if session is None or task is None or task.done():
            return False
        stream = getattr(session, "_write_stream", None)
        return not getattr(stream, "_closed", False)

    async def start(self, interceptor: ToolCallInterceptor) -> list[BaseTool]:
        """Start the server and return its tools (named `server_tool`), calling through
        `interceptor`; ServerDown when it cannot be started."""
        session = await self.session()
        self.tools = await load_mcp_tools(
            session,
            server_name=self.name,
            tool_name_prefix=True,
            tool_interceptors=[interceptor],
        )
        return self.tools

    async def session(self) -> ClientSession:
        """Return the live session, starting the server when it is not running."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self.running:
                assert self._session is not None
                return self._session
            await self._stop_task()
            return await self._launch()

    async def _launch(self) -> ClientSession:
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run(ready), name=f"mcp server {self.name}")
        try:
            session = await asyncio.wait_for(asyncio.shield(ready), START_SECONDS)
        except asyncio.CancelledError:
            await self._stop_task()  # the caller gave up (its call's timeout): it still ends
            raise
        except Exception as exc:
            await self._stop_task()
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved: the reason is raised below
            failed = leaf(exc)
            said = self.config.scrub(str(failed))
            reason = type(failed).__name__ + (f": {said}" if said else "")
            raise ServerDown(f"MCP server {self.name!r} did not start: {reason}") from None
        self.starts += 1
        self.error = None
        self._session = session
        return session

    async def _run(self, ready: asyncio.Future[ClientSession]) -> None:
        """Hold the session open until the server is stopped (or its connection fails)."""
        try:
            async with create_session(dict(self.config.connection)) as session:  # type: ignore[arg-type]
                await session.initialize()
                ready.set_result(session)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ServerDown(str(exc)))
            elif not isinstance(exc, asyncio.CancelledError):
                logger.warning("MCP server %s stopped: %s", self.name, type(exc).__name__)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._session = None

    def died(self) -> None:
        """Mark the session dead: the next call starts the server again."""
        self._session = None
        self._stop.set()

    async def _stop_task(self) -> None:
        task, self._task = self._task, None
        self._session = None
        if task is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), 10)
        except BaseException:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def close(self) -> None:
        """Stop the server (a stdio server's process ends with its stdin)."""
        await self._stop_task()


class McpServers:
    """Every server of MCP_CONFIG in this process, and their tools."""

    def __init__(self, configs: list[ServerConfig]) -> None:
        self.servers = {c.name: McpServer(c) for c in configs}

    async def start(self, interceptor_for: Any) -> None:
        """Start every server and list its tools; one that fails is logged once and its
        tools are left out (the bot runs on)."""

        async def one(server: McpServer) -> None:
            try:
                await server.start(interceptor_for(server))
            except ServerDown as exc:
                server.error = str(exc)
                logger.error("%s; its tools are left out", exc)
            except Exception as exc:
                server.error = f"{type(exc).__name__}: {server.config.scrub(str(leaf(exc)))}"
                failed = "MCP server %r failed: %s; its tools are left out"
                logger.error(failed, server.name, server.error)
                await server.close()

        await asyncio.gather(*(one(s) for s in self.servers.values()))

    def tools(self) -> list[BaseTool]:
        """Return the tools of every server that started."""
        return [t for s in self.servers.values() for t in s.tools]

    async def close(self) -> None:
        """Stop every server."""
        await asyncio.gather(*(s.close() for s in self.servers.values()))
