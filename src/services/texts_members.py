"""The bot's words about a group's members and their own facts (see texts.py)."""

from __future__ import annotations

MEMBER_TEXTS: dict[str, dict[str, str]] = {
    "ru": {
        "memory_cleared_yours": "Забыл ваши собственные факты ({facts}); память группы осталась.",
        "memory_yours": "[ваш] ",
        "export_md_member": "[участник {member}] ",
        "export_md_group_facts": "Ваши факты в группе {group}",
    },
    "en": {
        "memory_cleared_yours": "Forgot your own facts ({facts}); the group's memory stays.",
        "memory_yours": "[yours] ",
        "export_md_member": "[member {member}] ",
        "export_md_group_facts": "Your facts in the group {group}",
    },
}
