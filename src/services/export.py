"""/export: everything the bot keeps about an owner, as JSON and a readable Markdown twin.

The JSON holds the stored rows as they are (format EXPORT_FORMAT): the owner's profile,
every conversation with its running summary, every stored message (squashed originals
included) and squash, every fact with its history (a person's: also those kept about
them as a member of groups, by group), the compacts of previous
conversations, the texts kept for facts, usage totals by month and model, and the
scheduled tasks with their runs (reminders of inactivity are a setting of the profile).
The Markdown file says the same for reading, its times in the owner's zone (their /tz,
else TIMEZONE), named; the JSON's are ISO 8601 with their offset. The bot sends both as
files; `tgagent chat` writes them to the working directory.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from src.graph.context.render import when_local
from src.graph.deps import GraphDeps
from src.graph.timestamps import owner_zone
from src.services.texts import t
from src.storage.export_repo import ExportRepository

EXPORT_FORMAT = "tgagent-export/1"

Row = dict[str, Any]


@dataclass(frozen=True)
class ExportFile:
    """One file of an export."""

    name: str
    data: bytes


def _plain(value: Any) -> Any:
    """Return a stored value as JSON has it (times in ISO 8601, ids as text)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _facts(rows: list[Row]) -> list[Row]:
    """Return the current facts, each with its earlier values (oldest first) and, in a
    group, the member whose fact it is (`member_id`; 0: the group's own)."""
    by_key: dict[tuple[int, str], list[Row]] = {}
    for row in rows:
        by_key.setdefault((int(row.get("member_id") or 0), row["key"]), []).append(row)
    facts = []
    for (member, key), values in by_key.items():
        current = next((r for r in values if r.get("valid_to") is None), None)
        history = [
            {"value": r["value"], "from": r["created_at"], "until": r.get("valid_to")}
            for r in values
            if r is not current
        ]
        if current is None:
            continue
        facts.append(
            {
                "key": key,
                "member_id": member,
                "value": current["value"],
                "type": current["type"],
                "importance": current["importance"],
                "since": current["created_at"],
                "history": history,
            }
        )
    return facts


def _group_facts(rows: list[Row]) -> list[Row]:
    """Return a person's facts kept in groups, by group: each group's id and the facts."""
    by_group: dict[int, list[Row]] = {}
    for row in rows:
        by_group.setdefault(int(row["telegram_user_id"]), []).append(row)
    return [{"group_id": group, "facts": _facts(facts)} for group, facts in by_group.items()]


def build_export(owner: int, rows: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Return the export of what `ExportRepository.read` found about the owner."""
    messages: dict[str, list[Row]] = {}
    for message in rows["messages"]:
        item = {k: v for k, v in message.items() if k != "conversation_id"}
        messages.setdefault(str(message["conversation_id"]), []).append(item)
    squashes: dict[str, list[Row]] = {}
    for squash in rows["squashes"]:
        item = {k: v for k, v in squash.items() if k != "conversation_id"}
        squashes.setdefault(str(squash["conversation_id"]), []).append(item)
    conversations = [
        {
            **conv,
            "messages": messages.get(str(conv["id"]), []),
            "squashes": squashes.get(str(conv["id"]), []),
        }
        for conv in rows["conversations"]
    ]
    data = {
        "format": EXPORT_FORMAT,
        "exported_at": now,
        "owner_id": owner,
        "profile": rows["user"],
        "conversations": conversations,
        "facts": _facts(rows["facts"]),
        "facts_in_groups": _group_facts(rows.get("facts_as_member", [])),
        "previous_conversations": rows["compacts"],
        "texts_kept_for_facts": rows["pending"],
        "tasks": rows["tasks"],
        "usage": rows["usage"],
    }
    return dict(_plain(data))


def _local(value: str | None, zone: ZoneInfo) -> str:
    """Return a time of the export (ISO 8601) in the owner's zone, named as the stamps
    of their messages name it: `2026-11-28 12:37 Europe/Moscow`."""
    return f"{when_local(value, zone)} {zone.key}" if value else ""


def _day(value: str | None, zone: ZoneInfo) -> str:
    """Return the owner's local date of a time of the export (ISO 8601)."""
    return when_local(value, zone)[:10] if value else ""


def _quote(text: str) -> str:
    return "\n".join("> " + line for line in (text or "").splitlines() or [""])


def _markdown_facts(data: dict[str, Any], lang: str | None, zone: ZoneInfo) -> list[str]:
    lines = [f"## {t('export_md_facts', lang)}", ""]
    for fact in data["facts"]:
        whose = t("export_md_member", lang, member=fact["member_id"]) if fact["member_id"] else ""
        lines.append(f"- {whose}**{fact['key']}**: {fact['value']} ({fact['type']})")
        for old in fact["history"]:
            until = _day(old["until"], zone)
            lines.append(f"  - {t('export_md_was', lang, value=old['value'], until=until)}")
    if not data["facts"]:
        lines.append(t("export_md_none", lang))
    for group in data.get("facts_in_groups", []):
        lines += ["", f"### {t('export_md_group_facts', lang, group=group['group_id'])}", ""]
        for fact in group["facts"]:
            lines.append(f"- **{fact['key']}**: {fact['value']} ({fact['type']})")
            for old in fact["history"]:
                until = _day(old["until"], zone)
                lines.append(f"  - {t('export_md_was', lang, value=old['value'], until=until)}")
    return lines


def _markdown_conversation(conv: dict[str, Any], lang: str | None, zone: ZoneInfo) -> list[str]:
    lines = [f"### {_local(conv['created_at'], zone)} ({conv['id']})", ""]
    if conv["summary"]:
        lines += [f"*{t('export_md_summary', lang)}*", "", _quote(conv["summary"]), ""]
    for message in conv["messages"]:
        when = _local(message["created_at"], zone)
        squashed = f" ({t('export_md_squashed', lang)})" if message["squashed"] else ""
        lines += [f"**{message['role']}** #{message['number']}, {when}{squashed}:", ""]
        lines += [_quote(message["content"]), ""]
    return lines


def render_markdown(data: dict[str, Any], lang: str | None, zone: ZoneInfo) -> str:
    """Return the export as Markdown, for reading, its times in `zone` (the owner's)."""
    when = _local(data["exported_at"], zone)
    lines = [f"# {t('export_md_title', lang)}", "", when, ""]
    profile = data["profile"] or {}
    lines += [f"## {t('export_md_profile', lang)}", ""]
    lines += [f"- {k}: {v}" for k, v in profile.items()] or [t("export_md_none", lang)]
    lines += ["", *_markdown_facts(data, lang, zone), ""]
    lines += [f"## {t('export_md_compacts', lang)}", ""]
    for compact in data["previous_conversations"]:
        lines.append(f"- {_local(compact['created_at'], zone)}: {compact['summary']}")
    if not data["previous_conversations"]:
        lines.append(t("export_md_none", lang))
    lines += ["", f"## {t('export_md_conversations', lang)}", ""]
    for conv in data["conversations"]:
        lines += _markdown_conversation(conv, lang, zone)
    lines += [f"## {t('export_md_tasks', lang)}", ""]
    for task in data["tasks"]:
        repeat = t("task_repeat", lang, cron=task["repeat"]) if task["repeat"] else ""
        lines.append(f"- #{task['id']} ({task['status']}{repeat}): {task['instruction']}")
    if not data["tasks"]:
        lines.append(t("export_md_none", lang))
    lines += ["", f"## {t('export_md_usage', lang)}", ""]
    for row in data["usage"]:
        lines.append("- " + t("export_md_usage_line", lang, **row))
    if not data["usage"]:
        lines.append(t("export_md_none", lang))
    return "\n".join(lines) + "\n"


class MemoryExport:
    """Build an owner's export from the database."""

    def __init__(self, deps: GraphDeps) -> None:
        self.deps = deps
        self.repo = ExportRepository(deps.conversations.pool)

    async def collect(self, owner: int) -> dict[str, Any]:
        """Return everything stored about the owner, as the JSON file holds it."""
        return build_export(owner, await self.repo.read(owner), self.deps.clock())

    async def files(self, owner: int, lang: str | None = None) -> list[ExportFile]:
        """Return the export's two files: JSON, and its Markdown twin."""
        data = await self.collect(owner)
        stem = f"tgagent-export-{owner}-{data['exported_at'][:19].replace(':', '')}"
        as_json = json.dumps(data, ensure_ascii=False, indent=2)
        zone = owner_zone(data["profile"], self.deps.settings)
        return [
            ExportFile(f"{stem}.json", as_json.encode()),
            ExportFile(f"{stem}.md", render_markdown(data, lang, zone).encode()),
        ]


def write_files(files: list[ExportFile], directory: Path) -> list[Path]:
    """Write the export's files into `directory`; return their paths."""
    paths = []
    for file in files:
        path = directory / file.name
        path.write_bytes(file.data)
        paths.append(path)
    return paths
