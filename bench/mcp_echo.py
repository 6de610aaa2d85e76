"""The MCP server the MCP bench calls over stdio (the `mcp` SDK's FastMCP): one tool that
returns at once."""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP

server = FastMCP("bench")


@server.tool()
def echo(text: str) -> str:
    """Say `text` back."""
    return text


if __name__ == "__main__":
    server.run(transport="stdio")
