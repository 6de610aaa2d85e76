"""A stand-in for the summary and compact models behind the fake OpenAI server.

It answers tgagent's three memory prompts the way a small instruction-following model
would, from the text it is sent (no state of its own):
- fact extraction: `{"facts": [...]}` with one fact per user line (`[user]` or
  `[shared]`, like a naive model; in a group a `[member N]` line gives member N's
  facts, `whose: "member N"`, whatever names its text holds) saying "my <thing> is
  <value>" (or "меня зовут <name>"), keyed by the thing; "I am allergic to <x>" is a
  constraint (also from a `[shared]` line: the extractor has to vet it). Against the
  known facts the prompt shows: "I moved from <old> to <new>" supersedes the key whose
  value is <old> (else adds `city`), "forget that I lived in <old>" deletes the key whose
  value is <old>, and "forget my <thing>" deletes the key <thing>;
- summary updates: the previous summary plus a short line per new message, cut to about
  the length the prompt asks for (its oldest words first), and likewise when asked to
  shorten a summary;
- session compacts: `{"summary", "topics", "lastAction"}` built from the user's lines.
Anything else is answered like the default echo model.
"""

from __future__ import annotations

import json
import re
from typing import Any

from src.graph import prompts
from src.graph.timestamps import strip_stamp
from tests.fakes.openai_server import echo_reply, message_text

MEMORY_MODEL = "memory-model"
_MY = re.compile(r"\bmy ([a-z][a-z0-9 ]{0,30}?) is ([^.,;!?\n]+)", re.IGNORECASE)
_NAME_RU = re.compile(r"меня зовут ([^.,;!?\n]+)", re.IGNORECASE)
_LINE = re.compile(
    r"^\[(user|shared|assistant|tool|system|summary|(?:shared by )?member \d+)\]: ?(.*)$"
)
_MOVED = re.compile(r"\bmoved from ([^.,;!?\n]+?) to ([^.,;!?\n]+)", re.IGNORECASE)
_FORGET_VALUE = re.compile(
    r"\bforget that I (?:lived|live|was|worked) (?:in|at|as) ([^.,;!?\n]+)", re.IGNORECASE
)
_FORGET_KEY = re.compile(r"\bforget my ([a-z][a-z0-9 ]{0,30}?)\s*(?:[.,;!?]|$)", re.IGNORECASE)
_ALLERGY = re.compile(r"\b(?:I am|I'm) allergic to ([^.,;!?\n]+)", re.IGNORECASE)
KNOWN = "What is known about the user now (key: value):\n"


def section(prompt: str, start: str, end: str | None = None) -> str:
    """Return the text of `prompt` between the marker `start` and the marker `end`."""
    after = prompt.split(start, 1)[-1]
    return after.split(end, 1)[0] if end else after


def transcript(text: str) -> list[tuple[str, str]]:
    """Return the `[role]: text` lines of a memory prompt as (role, text), stamps removed."""
    lines = []
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match:
            lines.append((match.group(1), strip_stamp(match.group(2)).strip()))
    return lines


def known_in(prompt: str) -> dict[str, str]:
    """Return the current facts a facts prompt shows, as {key: value}."""
    known = {}
    for line in section(prompt, KNOWN, "\n\nMessages:").splitlines():
        line = re.sub(r"^- \[(?:group|member \d+)\] ", "- ", line)  # a group's labels
        key, sep, value = line.removeprefix("- ").partition(": ")
        if sep:
            known[key.strip()] = value.strip()
    return known


def key_of(value: str, known: dict[str, str]) -> str | None:
    """Return the known key whose value is `value` (any case), if any."""
    return next((k for k, v in known.items() if v.casefold() == value.strip().casefold()), None)


def facts_in(
    lines: list[tuple[str, str]], known: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Return the facts a user states in `lines` ("my X is Y", "меня зовут Y", allergies),
    and the supersedes and deletes they ask for against the `known` facts."""
    known = known or {}
    facts: dict[str, dict[str, Any]] = {}

    whose = ""

    def put(key: str, value: str, kind: str = "fact", action: str = "add") -> None:
        fact = {"action": action, "key": key, "value": value.strip(), "type": kind}
        facts.pop(whose + key, None)
        # A group's lines (`[member N]`): the fact is the line's member's, as told.
        facts[whose + key] = fact | ({"whose": whose} if whose else {})

    for role, text in lines:
        whose = role.removeprefix("shared by ") if "member" in role else ""
        if role not in ("user", "shared") and not whose:
            continue
        for match in _MY.finditer(text):
            put("_".join(match.group(1).lower().split()), match.group(2))
        for match in _NAME_RU.finditer(text):
            put("name", match.group(1))
        for match in _ALLERGY.finditer(text):
            put("allergy", match.group(1), "constraint")
        for match in _MOVED.finditer(text):
            old = key_of(match.group(1), known)
            put(old or "city", match.group(2), action="supersede" if old else "add")
        for match in _FORGET_VALUE.finditer(text):
            if (old := key_of(match.group(1), known)) is not None:
                put(old, "", action="delete")
        for match in _FORGET_KEY.finditer(text):
            put("_".join(match.group(1).lower().split()), "", action="delete")
    return [{**f, "importance": 7} for f in facts.values()]


def memory_reply(request: dict[str, Any]) -> str:
    """Answer one of tgagent's memory prompts (facts, summary, compact), else echo."""
    messages = request.get("messages") or []
    system = message_text(messages[0]) if messages else ""
    prompt = message_text(messages[-1]) if messages else ""
    if system == prompts.FACTS_SYSTEM:
        lines = transcript(section(prompt, "Messages:\n", "\n\nAnswer with"))
        return json.dumps({"facts": facts_in(lines, known_in(prompt))}, ensure_ascii=False)
    if system == prompts.SUMMARIZER_SYSTEM and "Current summary" not in prompt:
        # Asked to shorten a summary: like a model told "at most about N words".
        words = int(re.search(r"at most about (\d+) words", prompt).group(1))  # type: ignore[union-attr]
        return " ".join(section(prompt, "Summary:\n", "\n\nAnswer with").split()[-words:])
    if system == prompts.SUMMARIZER_SYSTEM:
        old = section(prompt, "Current summary (empty at first):\n", "\n\nNew messages:")
        new = transcript(section(prompt, "New messages:\n", "\n\nRules:"))
        words = int(re.search(r"at most about (\d+) words", prompt).group(1))  # type: ignore[union-attr]
        added = [f"{role}: {text[:60]}" for role, text in new if text]
        summary = ([] if old.strip() == "(empty)" else [old.strip()]) + added
        # Like a model told "at most about N words": the oldest details go first.
        kept = " | ".join(summary).split()
        return " ".join(kept[-words:])
    if system == prompts.COMPACT_SYSTEM:
        lines = transcript(section(prompt, "Messages:\n", "\n\nAnswer with"))
        asked = [text for role, text in lines if role == "user"]
        summary = ("Talked about: " + "; ".join(asked))[:480]
        topics = [t.split()[0] for t in asked[:3] if t.split()]
        last = next((text[:100] for role, text in reversed(lines) if role == "assistant"), "")
        return json.dumps(
            {"summary": summary, "topics": topics, "lastAction": last}, ensure_ascii=False
        )
    return echo_reply(request)
