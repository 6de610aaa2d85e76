"""MCP tools in a turn: offered only to the people a server allows, each call bounded,
and what a tool returns handed to the model as data from outside.

The turn's author is the state's (`member_id` in a group, else the owner; `role` the
bot decided): the model never names the user. A server's rule (`Allow`) decides which
of its tools a turn's request carries (`allowed_names`), and every call asks it again
(a model may name a tool it was not offered). A call is bounded by MCP_TOOL_TIMEOUT and
its text by MCP_RESULT_CHARS; a timeout, an error or a server gone answers the model
with a tool result saying so, and the turn goes on. The result is a tool message (never
a system message), wrapped in `<tool_output>` so the prompt marks it as a tool's.
Each call is recorded (`mcp_calls`: usage, and a call made once, src/graph/mcp/once.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_mcp_adapters.interceptors import MCPToolCallRequest, MCPToolCallResult
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, EmbeddedResource, TextContent, TextResourceContents
from psycopg import Error as DatabaseError
from psycopg_pool import PoolTimeout

from src.config import Settings
from src.graph.context.render import OUTSIDE_MARK
from src.graph.mcp.config import Allow, load_config
from src.graph.mcp.once import NOT_RECORDED, UNRECORDED, call_key, reused
from src.graph.mcp.servers import McpServer, McpServers, ServerDown, closed, unsent
from src.graph.rights import Role, role_of
from src.storage.mcp_calls_repo import McpCallRepository, Recorded

logger = logging.getLogger(__name__)

# What the model API accepts as a tool's name.
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
REFUSED = (
    "Refused: the person writing may not use {tool}; it was not offered to them. Tell them "
    "so (the bot's operator decides who may use it)."
)


def author_of(state: Mapping[str, Any]) -> int:
    """Return the Telegram user id of the turn's author: the member who wrote in a group,
    the owner in a private chat or the terminal (never an id the model gave)."""
    return int(state.get("member_id") or state.get("user_id") or 0)


def permits(allow: Allow, state: Mapping[str, Any], admins: Collection[int]) -> bool:
    """Tell whether the turn's author may use a server with rule `allow`."""
    return allow.permits(author_of(state), role_of(state), admins)


def wrap(tool: str, text: str) -> str:
    """Mark a tool's text as data from outside (an embedded closing tag is defused)."""
    inner = text.replace("</tool_output>", "</tool_output_>")
    return f'{OUTSIDE_MARK}tool="{tool}">\n{inner}\n</tool_output>'


def result_text(result: CallToolResult, cap: int) -> str:
    """Return a result's text blocks (other blocks named), cut at `cap` characters."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, EmbeddedResource) and isinstance(
            block.resource, TextResourceContents
        ):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{block.type} content not shown]")
    text = "\n".join(parts)
    if len(text) > cap:
        text = text[:cap] + f"\n[cut: the result had {len(text)} characters, {cap} are shown]"
    return text


async def start_mcp(
    settings: Settings, record: McpCallRepository | None = None, replaying: bool = False
) -> McpTools | None:
    """Read MCP_CONFIG and start its servers (None when it is not set); a bad file is a
    ConfigError of one line, a server that fails is left out. `record`: where calls are
    recorded and looked up (None: neither); `replaying`: give the recorded results, call
    nothing."""
    if settings.mcp_config is None:
        return None
    servers = McpServers(load_config(settings.mcp_config))
    tools = McpTools(servers, settings, record, replaying)
    try:
        await tools.start()
    except BaseException:
        await tools.close()
        raise
    return tools


class McpTools:
    """The MCP servers' tools of one process, with who may use them."""

    def __init__(
        self,
        servers: McpServers,
        settings: Settings,
        record: McpCallRepository | None = None,
        replaying: bool = False,
    ) -> None:
        self.servers = servers
        self.settings = settings
        self.record = record
        """Where calls are recorded and looked up (a turn's call is made once); None:
        calls are neither recorded nor looked up (`tgagent replay --live-tools`)."""
        self.replaying = replaying
        """A replay's: every call gets its recorded result, none is sent."""
        self.calls = 0
        """Calls sent to a server by this process."""

    @property
    def tools(self) -> list[BaseTool]:
        """Every tool of the servers that started (the graph's tool node runs them)."""
        return [t for t in self.servers.tools() if TOOL_NAME.match(t.name)]

    async def start(self) -> None:
        """Start the servers and list their tools (a server that fails is left out)."""
        await self.servers.start(self.interceptor)
        for tool in self.servers.tools():
            if not TOOL_NAME.match(tool.name):
                logger.warning("MCP tool %r left out: its name is not a valid tool name", tool.name)

    def allowed(self, state: Mapping[str, Any]) -> list[BaseTool]:
        """Return the tools the turn's author may use."""
        admins = self.settings.admin_user_ids
        return [
            t
            for s in self.servers.servers.values()
            if permits(s.config.allow, state, admins)
            for t in s.tools
            if TOOL_NAME.match(t.name)
        ]

    def for_user(self, user_id: int, role: Role) -> list[tuple[McpServer, list[BaseTool]]]:
        """Return each server whose tools `user_id`, acting with `role`, may use."""
        state = {"user_id": user_id, "role": role}
        return [
            (s, [t for t in s.tools if TOOL_NAME.match(t.name)])
            for s in self.servers.servers.values()
            if s.tools and permits(s.config.allow, state, self.settings.admin_user_ids)
        ]

    def interceptor(
        self, server: McpServer
    ) -> Callable[
        [MCPToolCallRequest, Callable[[MCPToolCallRequest], Awaitable[MCPToolCallResult]]],
        Awaitable[MCPToolCallResult],
    ]:
        """Return what runs each call of `server`'s tools: the rights, the live session,
        the bounds; the adapter's own handler (bound to the first session) is not used."""

        async def call(request: MCPToolCallRequest, _handler: Any) -> MCPToolCallResult:
            runtime = request.runtime
            state = getattr(runtime, "state", None) or {}
            call_id = str(getattr(runtime, "tool_call_id", "") or "")
            name = f"{server.name}_{request.name}"
            if not permits(server.config.allow, state, self.settings.admin_user_ids):
                return ToolMessage(
                    REFUSED.format(tool=name), tool_call_id=call_id, name=name, status="error"
                )
            text, ok = await self.once(server, request.name, request.args, state, call_id)
            content = wrap(name, text) if ok else text
            status = "success" if ok else "error"
            return ToolMessage(content, tool_call_id=call_id, name=name, status=status)

        return call

    async def once(
        self,
        server: McpServer,
        tool: str,
        args: dict[str, Any],
        state: Mapping[str, Any],
        call_id: str,
    ) -> tuple[str, bool]:
        """Make the turn's call of `tool` once (src/graph/mcp/once.py): a call this turn
        made before (a run of it that died, a replay) gets the recorded result; else it
        is claimed, sent (`run`) and its result recorded. Return the text for the model
        and whether the call succeeded."""
        name = f"{server.name}_{tool}"
        record = self.record
        if record is None:
            text, ok, _, _ = await self.run(server, tool, args, state)
            return text, ok
        key = call_key(state, call_id, name, args)
        message = state.get("input_message_id")
        if self.replaying:
            found = await record.recorded(int(message), key) if message else None
            return reused(found, name) if found else (NOT_RECORDED.format(tool=name), False)
        owner = int(state.get("user_id") or 0)
        if not message:  # no stored turn to know it by: counted only
            text, ok, outcome, ms = await self.run(server, tool, args, state)
            with contextlib.suppress(DatabaseError, PoolTimeout):
                await record.add(owner, key, server.name, tool, outcome, ms, text)
            return text, ok
        try:
            claim = await record.claim(owner, int(message), key, server.name, tool)
        except (DatabaseError, PoolTimeout):
            logger.warning("mcp call %s not made: its record failed", name, exc_info=True)
            return UNRECORDED.format(tool=name), False
        if isinstance(claim, Recorded):
            logger.info("mcp call %s of message %s was made before: not again", name, message)
            return reused(claim, name)
        text, ok, outcome, ms = await self.run(server, tool, args, state)
        try:
            await record.finish(claim, outcome, ms, text)
        except (DatabaseError, PoolTimeout):
            # Left `running`: a run of the turn made again says the answer was lost.
            logger.warning("mcp call %s: its result was not recorded", name, exc_info=True)
        return text, ok

    async def run(
        self, server: McpServer, tool: str, args: dict[str, Any], state: Mapping[str, Any]
    ) -> tuple[str, bool, str, float]:
        """Call `tool` on the live session within MCP_TOOL_TIMEOUT; return its text,
        whether it succeeded (else the text says what went wrong), the outcome (ok,
        error, timeout, stopped, down) and the milliseconds."""
        limit = self.settings.mcp_tool_timeout
        started = time.monotonic()
        self.calls += 1
        outcome = "ok"

        def ended(text: str, ok: bool) -> tuple[str, bool, str, float]:
            ms = (time.monotonic() - started) * 1000
            logger.info(
                "mcp call %s_%s by %s: %s in %.0f ms",
                server.name,
                tool,
                author_of(state),
                outcome,
                ms,
            )
            return text, ok, outcome, ms

        try:
            async with asyncio.timeout(limit):
                result = await self._call(server, tool, args)
        except TimeoutError:
            outcome = "timeout"
            return ended(
                f"Error: the tool {server.name}_{tool} did not answer within {limit:g} s; the "
                "call was given up. Tell the user, and do not claim it was done.",
                False,
            )
        except ServerDown:
            outcome = "down"
            said = f"Error: the MCP server {server.name!r} is not running; try again later."
            return ended(said, False)
        except Exception as exc:
            outcome = "error"
            if not isinstance(exc, McpError):
                # Not the server's answer: the connection failed (an HTTP server gone or
                # restarted). The next call connects again.
                server.died()
            if closed(exc):
                server.died()
                outcome = "stopped"
                return ended(
                    f"Error: the MCP server {server.name!r} stopped during the call; it is "
                    "started again at the next call. Whether the call took effect is unknown.",
                    False,
                )
            return ended(f"Error: {server.config.scrub(str(exc)) or type(exc).__name__}", False)
        text = result_text(result, self.settings.mcp_result_chars)
        if result.isError:
            # The tool's own words about its failure are from outside too.
            outcome = "error"
            return ended("Error from the tool:\n" + wrap(f"{server.name}_{tool}", text), False)
        return ended(text, True)

    async def _call(self, server: McpServer, tool: str, args: dict[str, Any]) -> CallToolResult:
        """Call on the live session; a call the server never ran (it died while idle, or
        restarted and forgot the session) starts or connects it again and is sent once
        more."""
        session = await server.session()
        try:
            return await session.call_tool(tool, args)
        except Exception as exc:
            if not unsent(exc):
                raise
            server.died()
        session = await server.session()
        return await session.call_tool(tool, args)

    async def close(self) -> None:
        """Stop every server."""
        await self.servers.close()
