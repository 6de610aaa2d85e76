"""/tools: the MCP tools a person may use where they ask (Telegram and `tgagent chat`)."""

from __future__ import annotations

from src.graph.mcp.tools import McpTools
from src.services.texts import t
from src.services.turn_types import Identity

# Characters of a tool's description shown in the list.
DESCRIPTION_CHARS = 120


def tools_text(mcp: McpTools | None, identity: Identity, lang: str | None) -> str:
    """Return the list of the MCP tools the identity's author may use, by server, with
    their descriptions' first lines; a sentence when there are none."""
    author = identity.member_id or identity.owner_id
    servers = mcp.for_user(author, identity.role) if mcp is not None else []
    if not servers:
        return t("tools_none", lang)
    lines = [t("tools_title", lang)]
    for server, tools in servers:
        lines.append(t("tools_server", lang, server=server.name))
        for tool in tools:
            about = (tool.description or "").strip().splitlines()
            first = about[0][:DESCRIPTION_CHARS] if about else ""
            lines.append(f"- {tool.name}" + (f": {first}" if first else ""))
    return "\n".join(lines)
