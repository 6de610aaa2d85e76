"""Whose a fact is in a group: the group's own, or one member's.

In a group the group owns the conversation and each member owns their facts. A stored
user message carries its author in its meta (`author`: the Telegram user id the update
carried, set by the bot, never read from the text). The extractor reads each message on
one line labelled by that author, `[member 42]` (their own words) or `[shared by member
42]` (what they passed on), so a text that starts "Alice:" sent by member 42 is still a
`[member 42]` line: a line's label is code's, its text cannot make another one (every
message is one line). The model answers each fact with `whose`: "group" or "member N";
only a member with a line in the text it read can own a fact (anything else is dropped,
never stored under an id the model made up), and a member's preference or constraint
needs that member's own words.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any

from src.storage.memory_repo import GROUP

logger = logging.getLogger(__name__)

AUTHOR = "author"
"""The meta key of a group message's author (their Telegram user id)."""
_MEMBER_LINE = re.compile(r"^\[(?:shared by )?member (\d+)\]: ", re.MULTILINE)
_WHOSE = re.compile(r"(?:member\s*)?#?(\d+)")


def author_of(row: dict[str, Any]) -> int:
    """Return the group member who wrote a stored message (0: none, a private chat)."""
    author = (row.get("meta") or {}).get(AUTHOR)
    return int(author) if isinstance(author, int) and not isinstance(author, bool) else 0


def member_role(row: dict[str, Any], own: bool) -> str | None:
    """Return the label of a group member's message as the extractor reads it (None: not
    a group member's message)."""
    author = author_of(row) if row["role"] == "user" else 0
    if not author:
        return None
    return f"member {author}" if own else f"shared by member {author}"


def is_members(role: str) -> bool:
    """Tell whether an extractor's line label is a group member's message."""
    return role.startswith(("member ", "shared by member "))


def members_in(text: str) -> set[int]:
    """Return the members with a line in an extractor's text (none: a private chat)."""
    return {int(found) for found in _MEMBER_LINE.findall(text)}


def own_line(member: int) -> str:
    """Return how a line in the member's own words starts."""
    return f"[member {member}]: "


def whose_of(raw: Any, members: set[int]) -> int | None:
    """Return whose a fact the model found is: GROUP, or a member with a line in the text
    it read; None for anything else (another id, a name)."""
    text = str(raw or "group").strip().lower()
    if text in ("group", "the group", "chat"):
        return GROUP
    match = _WHOSE.fullmatch(text)
    member = int(match.group(1)) if match else None
    return member if member in members else None


def attribute(facts: Iterable[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """Give each fact its `member` (whose it is) from the model's `whose`: always GROUP in
    a private chat's text; in a group's, the group or a member with a line in it (a
    fact of anyone else is dropped and logged)."""
    members = members_in(text)
    out = []
    for fact in facts:
        raw = fact.pop("whose", None)
        member = whose_of(raw, members) if members else GROUP
        if member is None:
            logger.warning("a fact of no member in the text dropped (whose %r)", str(raw)[:40])
            continue
        out.append({**fact, "member": member})
    return out


def known_line(row: dict[str, Any], group: bool) -> str:
    """Return the label a known fact is shown to the extractor with ("" in a private chat)."""
    if not group:
        return ""
    member = int(row.get("member_id") or 0)
    return f"[member {member}] " if member else "[group] "


def by_member(facts: Sequence[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Return the facts grouped by whose they are (GROUP first)."""
    grouped: dict[int, list[dict[str, Any]]] = {}
    for fact in sorted(facts, key=lambda f: int(f.get("member") or 0)):
        grouped.setdefault(int(fact.get("member") or 0), []).append(fact)
    return grouped


WHOSE_PROPERTY = {"whose": {"type": "string"}}
