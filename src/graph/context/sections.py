"""The system prompt: the base prompt, then one delimited memory section.

The memory section holds what was written down from earlier messages (typed facts,
previous conversations' compacts, the running summary). All of it comes from text users
and models wrote, so it is data: it sits between `<memory>` and `</memory>`, the base
prompt tells the model never to follow instructions found there, and a text that tries
to close the section early is defused. Each part stays within its layer's budget.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from zoneinfo import ZoneInfo

from src.config import Settings
from src.graph import prompts
from src.graph.context.budget import Layers, truncate_start, truncate_text
from src.graph.context.render import when_local
from src.graph.timestamps import strip_stamp, turn_zone
from src.graph.tokens import TokenCounter
from src.storage.memory_repo import fact_key, fact_value

Row = dict[str, Any]

# Analytical requests (incidents, diagnosis, comparison, verification) need an objective
# answer; seed 002 leaves preferences and hypotheses out of those, to avoid anchoring.
_OBJECTIVE_REQUEST = re.compile(
    r"\b(analy[sz]|objective|unbiased|impartial|neutral|fact[- ]?check|verify|evidence|"
    r"diagnos|root cause|incident|debug|troubleshoot|compar|evaluat|assess|pros and cons|"
    r"statistic|проанализ|анализ|объективн|беспристрастн|непредвзят|нейтральн|провер|"
    r"доказ|диагност|первопричин|инцидент|отлад|сравн|оцени|плюсы и минусы|статистик)",
    re.IGNORECASE,
)
SOFT_TYPES = ("preference", "hypothesis")
_TYPE_LABELS = {
    "preference": "[preference] ",
    "hypothesis": "[hypothesis] ",
    "constraint": "[constraint] ",
}
# Anything that looks like the section's own tags, inside the data: `< / memory >`, the
# same with invisible characters inside (zero-width, soft hyphen, bidi controls, variation
# selectors, tag characters: what NFKC or a model's tokenizer ignores), in full-width or
# small-form brackets, slash and letters, or with Cyrillic and Greek look-alike letters.
_HIDDEN = (
    r"[\s\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
    r"\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0"
    r"\U000e0000-\U000e007f\U000e0100-\U000e01ef]*"
)
_LOOKALIKES = {
    "<": "<\uff1c\ufe64",
    "/": "/\uff0f\u2215\u2044",
    "m": "m\uff4d\u043c",
    "e": "e\uff45\u0435",
    "o": "o\uff4f\u043e\u03bf",
    "r": "r\uff52",
    "y": "y\uff59\u0443",
    ">": ">\uff1e\ufe65",
}


def _like(chars: str) -> str:
    return _HIDDEN.join(f"[{_LOOKALIKES[c]}]" for c in chars)


_TAG = re.compile(
    f"{_like('<')}{_HIDDEN}({_like('/')})?{_HIDDEN}{_like('memory')}{_HIDDEN}{_like('>')}",
    re.IGNORECASE,
)


def defuse(text: str) -> str:
    """Return data text that cannot open or close the memory section."""
    return _TAG.sub(lambda m: f"‹{'/' if m.group(1) else ''}memory›", text)


def needs_objectivity(text: str, mode: str) -> bool:
    """Tell whether preferences and hypotheses stay out of the prompt for this request.

    `always`: always out; `never`: always in (labelled); `auto`: out when the user's
    message asks for analysis, diagnosis, comparison, evaluation or verification.
    """
    if mode == "always":
        return True
    if mode == "never":
        return False
    return bool(_OBJECTIVE_REQUEST.search(strip_stamp(text)))


def fact_line(fact: Row) -> str:
    """Render one fact as `- [type] key: value` on one line (plain facts carry no label).

    In a group, a member's own fact is marked as the writing member's: the prompt
    carries the group's facts and those of the member whose message it answers only.
    """
    label, key, value = _TYPE_LABELS.get(fact["type"], ""), fact_key(fact["key"]), fact["value"]
    whose = prompts.MEMBER_FACT_LABEL if fact.get("member_id") else ""
    return defuse(f"- {whose}{label}{key}: {fact_value(value)}")


def facts_sections(
    facts: Sequence[Row], budget: int, counter: TokenCounter, objective: bool, limit: int
) -> tuple[str, str]:
    """Return the facts layer within `budget`, most important first, in two parts.

    The first (facts and constraints) goes in the system prompt. It does not depend on
    the message being answered, so the prompt's prefix stays the same from turn to turn
    for a cache. The second (preferences and hypotheses, labelled) follows the user's
    current message, and only when the request does not need an objective answer; then
    it is a note that they were left out, if there were any. The selection itself does
    not depend on the request: both parts share the budget the same way every turn.
    """
    # Stable: equal importance keeps the repository's order (newest first).
    ranked = sorted(facts, key=lambda f: -int(f.get("importance") or 0))[:limit]
    soft_header = prompts.SOFT_FACTS_HEADER + "\n" + prompts.FACTS_SOFT_NOTE
    has_soft = any(f.get("type") in SOFT_TYPES for f in ranked)
    left = budget - counter.count(prompts.FACTS_HEADER) - 1
    if has_soft:
        left -= counter.count(soft_header) + 1
    hard: list[str] = []
    soft: list[str] = []
    for fact in ranked:
        line = fact_line(fact)
        cost = counter.count(line) + 1
        if cost <= left:
            (soft if fact.get("type") in SOFT_TYPES else hard).append(line)
            left -= cost
    stable = prompts.FACTS_HEADER + "\n" + "\n".join(hard) if hard else ""
    if not soft:
        return stable, ""
    if objective:
        return stable, prompts.FACTS_OBJECTIVE_NOTE
    return stable, soft_header + "\n" + "\n".join(soft)


def compact_line(compact: Row, zone: ZoneInfo) -> str:
    """Render one session compact as a line: date, summary, topics, last action."""
    line = f"- {when_local(compact.get('created_at'), zone)}: {compact['summary'].strip()}"
    if compact.get("topics"):
        line += f" Topics: {', '.join(compact['topics'])}."
    if compact.get("last_action"):
        line += f" Last action: {compact['last_action']}."
    return defuse(line)


def compacts_section(
    compacts: Sequence[Row], budget: int, counter: TokenCounter, zone: ZoneInfo
) -> str:
    """Return "Previous conversations" within `budget`: the newest that fit, oldest first."""
    header = prompts.PREVIOUS_CONVERSATIONS_HEADER
    left = budget - counter.count(header) - 1
    lines: list[str] = []
    for compact in compacts:  # newest first
        line = compact_line(compact, zone)
        if counter.count(line) + 1 > left:
            line = truncate_text(line, left - 1, counter)
        if not line:
            break
        lines.append(line)
        left -= counter.count(line) + 1
    if not lines:
        return ""
    text = header + "\n" + "\n".join(reversed(lines))
    while lines and counter.count(text) > budget:
        lines.pop()
        text = header + "\n" + "\n".join(reversed(lines))
    return text if lines else ""


def summary_section(summary: str, budget: int, counter: TokenCounter) -> str:
    """Return the running summary under its header within `budget`.

    Cut, it keeps its newest part (from a sentence): what was folded last, which has
    just left the window, and a line under the header says the oldest part is left out.
    """
    summary = defuse((summary or "").strip())
    if not summary:
        return ""
    header = prompts.SUMMARY_HEADER
    if counter.count(summary) <= budget - counter.count(header) - 2:
        return header + "\n" + summary
    header += "\n" + prompts.SUMMARY_CUT_LINE
    text = truncate_start(summary, budget - counter.count(header) - 2, counter)
    return header + "\n" + text if text else ""


def system_sections(
    state: dict[str, Any], layers: Layers, counter: TokenCounter, settings: Settings
) -> dict[str, str]:
    """Return the prompt's memory parts, each within its layer's budget.

    `summary` shares BUDGET_SUMMARY with `previous`: previous conversations get at most
    a third of it, the running summary the rest (cut, its newest part: `summary_section`).
    Every compact in the state belongs to a session that has ended, this conversation's
    earlier sessions included. `soft` (the user's preferences and hypotheses, or the note
    that an objective request leaves them out) is sent after the current message, not in
    the system prompt.
    """
    objective = needs_objectivity(state.get("input_text", ""), settings.facts_objective_mode)
    compacts = list(state.get("compacts") or [])[: settings.compacts_in_prompt]
    previous = compacts_section(compacts, layers.summary // 3, counter, turn_zone(state, settings))
    used = counter.count(previous) + 2 if previous else 0
    facts, soft = facts_sections(
        state.get("facts") or [],
        layers.facts,
        counter,
        objective,
        settings.max_facts_in_prompt,
    )
    return {
        "base": base_prompt(settings),
        "previous": previous,
        "facts": facts,
        "summary": summary_section(state.get("summary") or "", layers.summary - used, counter),
        "soft": soft,
    }


def base_prompt(settings: Settings) -> str:
    """Return the instructions, asking for plain text when replies are not rendered."""
    if settings.telegram_reply_format == "plain":
        return f"{prompts.SYSTEM_PROMPT}\n{prompts.PLAIN_TEXT_NOTE}"
    return prompts.SYSTEM_PROMPT


def memory_section(parts: Sequence[str]) -> str:
    """Wrap the memory parts in the delimited data section ("" when there are none)."""
    body = "\n\n".join(p for p in parts if p)
    return f"{prompts.MEMORY_OPEN}\n{body}\n{prompts.MEMORY_CLOSE}" if body else ""


def system_prompt(sections: dict[str, str]) -> str:
    """Return the base prompt followed by the memory section.

    What changes least comes first, for a prompt cache: previous conversations (when a
    session ends), facts (when extracted), the running summary (when messages leave the
    window).
    """
    memory = memory_section([sections["previous"], sections["facts"], sections["summary"]])
    return sections["base"] + ("\n\n" + memory if memory else "")
