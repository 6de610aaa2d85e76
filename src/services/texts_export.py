"""The bot's words in the Markdown file of /export (see texts.py and src/services/export.py)."""

from __future__ import annotations

EXPORT_TEXTS: dict[str, dict[str, str]] = {
    "ru": {
        "export_md_title": "Всё, что tgagent хранит о вас",
        "export_md_profile": "Профиль",
        "export_md_facts": "Факты",
        "export_md_was": "было: {value} (до {until})",
        "export_md_compacts": "Прошлые беседы",
        "export_md_conversations": "Разговоры",
        "export_md_summary": "Сводка",
        "export_md_squashed": "сжато",
        "export_md_usage": "Расход токенов",
        "export_md_usage_line": "{month}, {model}: вызовов {calls}, токенов {input_tokens} "
        "на входе и {output_tokens} на выходе",
        "export_md_none": "нет",
    },
    "en": {
        "export_md_title": "Everything tgagent keeps about you",
        "export_md_profile": "Profile",
        "export_md_facts": "Facts",
        "export_md_was": "was: {value} (until {until})",
        "export_md_compacts": "Previous conversations",
        "export_md_conversations": "Conversations",
        "export_md_summary": "Summary",
        "export_md_squashed": "compressed",
        "export_md_usage": "Tokens spent",
        "export_md_usage_line": "{month}, {model}: {calls} calls, {input_tokens} tokens in "
        "and {output_tokens} out",
        "export_md_none": "none",
    },
}
