"""Render `AgentService.memory_report` as the text of the /memory command."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from src.services.texts import t

SUMMARY_CHARS = 1500
COMPACT_CHARS = 300
LABELLED_TYPES = ("preference", "hypothesis", "constraint")


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split()) if "\n" not in text else text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _fact_line(fact: dict[str, Any], lang: str | None) -> str:
    kind = fact.get("type") or "fact"
    label = f" ({t('fact_type_' + kind, lang)})" if kind in LABELLED_TYPES else ""
    return f"• {fact.get('key', '?')}: {fact.get('value', '')}{label}"


def _compact_line(compact: dict[str, Any]) -> str:
    when = compact.get("created_at")
    stamp = f"{when:%Y-%m-%d} " if isinstance(when, datetime) else ""
    topics = compact.get("topics") or []
    about = f" [{', '.join(topics)}]" if topics else ""
    return f"• {stamp}{_clip(str(compact.get('summary') or ''), COMPACT_CHARS)}{about}"


def render_memory(report: dict[str, Any], lang: str | None) -> str:
    """Return what the bot keeps about an owner, section by section."""
    parts = [
        t("memory_title", lang),
        t(
            "memory_window",
            lang,
            window=report.get("window", 0),
            stored=report.get("stored_messages", 0),
        ),
    ]
    summary = str(report.get("summary") or "").strip()
    if summary:
        parts.append(t("memory_summary", lang, summary=_clip(summary, SUMMARY_CHARS)))
    else:
        parts.append(t("memory_no_summary", lang))
    facts = list(report.get("facts") or [])
    if facts:
        lines = [_fact_line(f, lang) for f in facts]
        parts.append("\n".join([t("memory_facts", lang, count=len(facts)), *lines]))
    else:
        parts.append(t("memory_no_facts", lang))
    compacts = list(report.get("compacts") or [])
    if compacts:
        lines = [_compact_line(c) for c in compacts]
        parts.append("\n".join([t("memory_compacts", lang, count=len(compacts)), *lines]))
    else:
        parts.append(t("memory_no_compacts", lang))
    on = bool(report.get("reminders"))
    parts.append(t("memory_reminders_on" if on else "memory_reminders_off", lang))
    parts.append(t("memory_hint", lang))
    return "\n\n".join(parts)
