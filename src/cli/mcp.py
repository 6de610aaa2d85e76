"""`tgagent mcp list`: the MCP servers of MCP_CONFIG, their tools and who may use them."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

# The MCP client (and LangChain with it) is imported when the command runs, not for
# `tgagent --help`.
if TYPE_CHECKING:
    from src.config import Settings
    from src.graph.mcp.tools import McpTools


def register(sub: Any, db_sub: Any) -> None:
    """Add `tgagent mcp list`."""
    del db_sub
    parser = sub.add_parser("mcp", help="the MCP servers whose tools the model may use")
    mcp_sub = parser.add_subparsers(dest="mcp_command", required=True)
    listing = mcp_sub.add_parser("list", help="start each server and list its tools")
    listing.set_defaults(handler=list_servers, quiet_logs=True)


def render(mcp: McpTools) -> str:
    """Return each server: how it is reached (no secret), who may use it, its tools."""
    lines: list[str] = []
    for server in mcp.servers.servers.values():
        config = server.config
        lines.append(f"{server.name} ({config.transport}: {config.where})")
        lines.append(f"  allowed: {config.allow.describe()}")
        if server.error:
            lines.append(f"  not running: {server.error}")
        for tool in server.tools:
            about = (tool.description or "").strip().splitlines()
            lines.append(f"  - {tool.name}" + (f": {about[0]}" if about else ""))
    return "\n".join(lines)


async def list_servers(args: argparse.Namespace, settings: Settings) -> int:
    """Print the servers of MCP_CONFIG with their tools (1 when one did not start)."""
    from src.graph.mcp.tools import start_mcp

    del args
    mcp = await start_mcp(settings)
    if mcp is None:
        print("MCP_CONFIG is not set: no MCP servers.")  # noqa: T201
        return 0
    try:
        print(render(mcp) or "MCP_CONFIG lists no servers.")  # noqa: T201
        failed = any(s.error for s in mcp.servers.servers.values())
    finally:
        await mcp.close()
    return 1 if failed else 0
