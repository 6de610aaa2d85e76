"""The bot's words about the tools of MCP servers (/tools), in Russian and English;
`src/services/texts.py` merges them into its TEXTS."""

from __future__ import annotations

TOOL_TEXTS: dict[str, dict[str, str]] = {
    "ru": {
        "cmd_tools": "какие внешние инструменты вам доступны",
        "tools_none": "Внешних инструментов (MCP) для вас здесь нет; мои собственные — "
        "память, поиск по истории, время и задачи — работают как обычно.",
        "tools_title": "Внешние инструменты (MCP), которыми я могу пользоваться для вас здесь:",
        "tools_server": "{server}:",
    },
    "en": {
        "cmd_tools": "which outside tools you may use",
        "tools_none": "No outside tools (MCP) are available to you here; my own ones — "
        "memory, history search, time and tasks — work as always.",
        "tools_title": "Outside tools (MCP) I can use for you here:",
        "tools_server": "{server}:",
    },
}
