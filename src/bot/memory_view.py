"""Render `AgentService.memory_report` as the pages of the /memory command.

Every current fact (with the value it replaced and when) and the compacts of previous
conversations make one numbered list, cut into pages that each fit one Telegram
message; the first page starts with the overview (working memory, summary, reminders).
Under a page, a 🗑 button per item deletes that item, and ◀ ▶ turn the pages. A page is
a function of the report alone, so a press renders its page again from a fresh report.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from src.services.texts import t
from src.storage.memory_repo import fact_key, fact_value

SUMMARY_CHARS = 1500
COMPACT_CHARS = 300
TOPICS_CHARS = 100
PREVIOUS_CHARS = 80
LABELLED_TYPES = ("preference", "hypothesis", "constraint")
PAGE_ITEMS = 10
# The overview and the items of one page at most: with the section headers, the page
# line and the hint, a page stays under Telegram's 4096 characters.
PAGE_CHARS = 3400
BUTTONS_PER_ROW = 5
# The buttons' data: "mem:p:<page>" turns to a page; "mem:f:<fact id>:<page>" and
# "mem:c:<compact id>:<page>" delete an item, then show that page again.
MEMORY_DATA = "mem:"
FACT, COMPACT, PAGE = "f", "c", "p"


@dataclass(frozen=True)
class Item:
    """One numbered line of the list: a fact or a compact."""

    kind: str
    item_id: int | None
    number: int
    line: str


@dataclass(frozen=True)
class Press:
    """What a /memory button asks: to show `page`, after deleting an item (FACT or
    COMPACT `item_id`) when `kind` says so."""

    kind: str
    page: int
    item_id: int = 0


@dataclass(frozen=True)
class MemoryPage:
    """One page of /memory: its text and its buttons."""

    text: str
    markup: InlineKeyboardMarkup | None
    page: int
    """The page shown (a page past the end shows the last)."""


def press_data(kind: str, page: int, item_id: int | None = None) -> str:
    """Return a button's callback data (at most 64 bytes, as Telegram allows)."""
    return (
        f"{MEMORY_DATA}{kind}:{page}"
        if item_id is None
        else f"{MEMORY_DATA}{kind}:{item_id}:{page}"
    )


def parse_press(data: str | None) -> Press | None:
    """Return what a button's data asks, or None when it is not a /memory button's."""
    parts = (data or "").removeprefix(MEMORY_DATA).split(":")
    if not (data or "").startswith(MEMORY_DATA) or not all(p.isdigit() for p in parts[1:]):
        return None
    if parts[0] == PAGE and len(parts) == 2:
        return Press(PAGE, int(parts[1]))
    if parts[0] in (FACT, COMPACT) and len(parts) == 3:
        return Press(parts[0], int(parts[2]), int(parts[1]))
    return None


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split()) if "\n" not in text else text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _day(when: Any, zone: ZoneInfo | None) -> str | None:
    """Return a stored time's day in the owner's `zone` (None: not a time)."""
    if not isinstance(when, datetime):
        return None
    return f"{when.astimezone(zone) if zone is not None else when:%Y-%m-%d}"


def _fact_line(
    number: int, fact: dict[str, Any], lang: str | None, zone: ZoneInfo | None = None
) -> str:
    kind = fact.get("type") or "fact"
    label = f" ({t('fact_type_' + kind, lang)})" if kind in LABELLED_TYPES else ""
    key, value = fact_key(fact.get("key", "?")), fact_value(fact.get("value", ""))
    # In a group: the asking member's own fact (the others shown are the group's).
    whose = t("memory_yours", lang) if fact.get("member_id") else ""
    line = f"{number}. {whose}{key}: {value}{label}"
    previous, until = fact.get("previous_value"), fact.get("previous_until")
    if previous:
        date = _day(until, zone) or "?"
        line += t("memory_was", lang, value=_clip(fact_value(previous), PREVIOUS_CHARS), date=date)
    return line


def _compact_line(number: int, compact: dict[str, Any], zone: ZoneInfo | None = None) -> str:
    day = _day(compact.get("created_at"), zone)
    stamp = f"{day} " if day else ""
    topics = _clip(", ".join(compact.get("topics") or []), TOPICS_CHARS)
    about = f" [{topics}]" if topics else ""
    summary = _clip(str(compact.get("summary") or ""), COMPACT_CHARS)
    return f"{number}. {stamp}{summary}{about}"


def items_of(report: dict[str, Any], lang: str | None) -> list[Item]:
    """Return the facts, then the compacts, as one numbered list, dated in the owner's
    zone (the report's `zone`)."""
    facts, zone = list(report.get("facts") or []), report.get("zone")
    items = [
        Item(FACT, f.get("id"), n, _fact_line(n, f, lang, zone)) for n, f in enumerate(facts, 1)
    ]
    for n, compact in enumerate(report.get("compacts") or [], len(items) + 1):
        items.append(Item(COMPACT, compact.get("id"), n, _compact_line(n, compact, zone)))
    return items


def paginate(items: list[Item], first_room: int) -> list[list[Item]]:
    """Cut the list into pages of at most PAGE_ITEMS items and PAGE_CHARS characters
    (`first_room` on the first page, which holds the overview); at least one page."""
    pages: list[list[Item]] = []
    page: list[Item] = []
    room = first_room
    for item in items:
        cost = len(item.line) + 1
        if page and (len(page) >= PAGE_ITEMS or cost > room):
            pages.append(page)
            page, room = [], PAGE_CHARS
        page.append(item)
        room -= cost
    return [*pages, page]


def _overview(report: dict[str, Any], lang: str | None) -> list[str]:
    window, stored = report.get("window", 0), report.get("stored_messages", 0)
    shown = report.get("in_window", min(window, stored))
    window_line = t("memory_window", lang, shown=shown, window=window, stored=stored)
    parts = [t("memory_title", lang), window_line]
    summary = str(report.get("summary") or "").strip()
    if summary:
        parts.append(t("memory_summary", lang, summary=_clip(summary, SUMMARY_CHARS)))
    else:
        parts.append(t("memory_no_summary", lang))
    return parts


def _sections(report: dict[str, Any], lang: str | None, items: list[Item]) -> list[str]:
    """Return the page's list, under the header of each kind it holds."""
    parts = []
    for kind, key, rows in (
        (FACT, "memory_facts", report.get("facts")),
        (COMPACT, "memory_compacts", report.get("compacts")),
    ):
        lines = [item.line for item in items if item.kind == kind]
        if lines:
            parts.append("\n".join([t(key, lang, count=len(rows or [])), *lines]))
    return parts


def memory_page(report: dict[str, Any], lang: str | None, page: int = 0) -> MemoryPage:
    """Return page `page` of /memory (from 0; past the end: the last one)."""
    head = _overview(report, lang)
    reminders = t(
        "memory_reminders_on" if report.get("reminders") else "memory_reminders_off", lang
    )
    empty = [t(f"memory_no_{kind}", lang) for kind in ("facts", "compacts") if not report.get(kind)]
    first_room = PAGE_CHARS - sum(len(p) + 2 for p in [*head, *empty, reminders])
    pages = paginate(items_of(report, lang), first_room)
    page = max(0, min(page, len(pages) - 1))
    parts = (
        [*head, *empty] if page == 0 else [t("memory_page", lang, page=page + 1, pages=len(pages))]
    )
    parts += _sections(report, lang, pages[page])
    if page == 0:
        parts.append(reminders)
    if len(pages) > 1:
        parts.append(t("memory_pages", lang, page=page + 1, pages=len(pages)))
    parts.append(t("memory_hint", lang))
    return MemoryPage("\n\n".join(parts), _keyboard(pages[page], page, len(pages)), page)


def _keyboard(items: list[Item], page: int, pages: int) -> InlineKeyboardMarkup | None:
    """A 🗑 button per item of the page, then ◀ ▶ when there are several pages."""
    buttons = [
        InlineKeyboardButton(
            f"🗑 {item.number}", callback_data=press_data(item.kind, page, item.item_id)
        )
        for item in items
        if item.item_id is not None
    ]
    rows = [buttons[i : i + BUTTONS_PER_ROW] for i in range(0, len(buttons), BUTTONS_PER_ROW)]
    if pages > 1:
        rows.append(
            [
                InlineKeyboardButton("◀", callback_data=press_data(PAGE, (page - 1) % pages)),
                InlineKeyboardButton(f"{page + 1}/{pages}", callback_data=press_data(PAGE, page)),
                InlineKeyboardButton("▶", callback_data=press_data(PAGE, (page + 1) % pages)),
            ]
        )
    return InlineKeyboardMarkup(rows) if rows else None


def render_memory(report: dict[str, Any], lang: str | None, page: int = 0) -> str:
    """Return the text of page `page` of /memory."""
    return memory_page(report, lang, page).text
