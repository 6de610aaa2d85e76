"""Typed facts (seed 002): the prompt's facts layer, and their extraction from overflow
before it is summarized, merged by key.

The summary model answers with JSON; anything else it may send (prose, code fences, a
truncated array, wrong types) is tolerated: what can be read is kept, the rest dropped.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage

from src.graph import prompts
from src.graph.deps import GraphDeps
from src.graph.tokens import TokenCounter
from src.storage.memory_repo import FACT_TYPES

logger = logging.getLogger(__name__)

# Keys shown to the extractor so it reuses them (merge by key); bounded to bound the call.
KNOWN_KEYS_IN_PROMPT = 60
MAX_FACTS_PER_CALL = 30
_TYPE_ALIASES = {
    "facts": "fact",
    "data": "fact",
    "pref": "preference",
    "preferences": "preference",
    "like": "preference",
    "likes": "preference",
    "guess": "hypothesis",
    "assumption": "hypothesis",
    "hypotheses": "hypothesis",
    "limit": "constraint",
    "requirement": "constraint",
    "constraints": "constraint",
    "rule": "constraint",
}
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_NOT_KEY = re.compile(r"[^\w]+")


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
# The time stamp in front of a stored user message: `[Текущее время: 2025-01-01 10:00] `.
_STAMP = re.compile(r"^\[[^\]]*\]\s*")


def needs_objectivity(text: str, mode: str) -> bool:
    """Tell whether preferences and hypotheses stay out of the prompt for this request.

    `always`: always out; `never`: always in (labelled); `auto`: out when the user's
    message asks for analysis, diagnosis, comparison, evaluation or verification.
    """
    if mode == "always":
        return True
    if mode == "never":
        return False
    return bool(_OBJECTIVE_REQUEST.search(_STAMP.sub("", text or "", count=1)))


def fact_line(fact: dict[str, Any]) -> str:
    """Render one fact as `- [type] key: value` (plain facts carry no label)."""
    return f"- {_TYPE_LABELS.get(fact['type'], '')}{fact['key']}: {fact['value']}"


def facts_section(
    facts: Sequence[dict[str, Any]],
    budget: int,
    counter: TokenCounter,
    objective: bool,
    limit: int,
) -> str:
    """Return the facts layer within `budget`: most important first, soft ones labelled."""
    chosen = [f for f in facts if not (objective and f.get("type") in SOFT_TYPES)]
    # Stable: equal importance keeps the repository's order (newest first).
    chosen.sort(key=lambda f: -int(f.get("importance") or 0))
    has_soft = any(f.get("type") in SOFT_TYPES for f in chosen)
    header = prompts.FACTS_HEADER
    if has_soft:
        header += "\n" + prompts.FACTS_SOFT_NOTE
    elif objective and len(chosen) < len(facts):
        header += "\n" + prompts.FACTS_OBJECTIVE_NOTE
    left = budget - counter.count(header) - 1
    lines: list[str] = []
    for fact in chosen[:limit]:
        line = fact_line(fact)
        cost = counter.count(line) + 1
        if cost <= left:
            lines.append(line)
            left -= cost
    if not lines:
        return ""
    text = header + "\n" + "\n".join(lines)
    # The note may promise labelled lines the budget left out; the count is what matters.
    while lines and counter.count(text) > budget:
        lines.pop()
        text = header + "\n" + "\n".join(lines)
    return text if lines else ""


# --- extraction -----------------------------------------------------------------------


def load_json(text: str) -> Any:
    """Return the first JSON value found in a model's answer, or None.

    Accepts a bare value, one in a ``` fence, or one inside prose.
    """
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        candidate = candidate.strip()
        try:
            return json.loads(candidate)
        except ValueError:
            pass
        for start in (i for i, ch in enumerate(candidate) if ch in "[{"):
            try:
                return decoder.raw_decode(candidate, start)[0]
            except ValueError:
                continue
    return None


def normalize_key(key: Any) -> str:
    """Return a fact key as `snake_case` (any script), at most 64 characters."""
    return _NOT_KEY.sub("_", str(key).strip().lower()).strip("_")[:64]


def normalize_fact(item: Any) -> dict[str, Any] | None:
    """Return a storable fact from one item of the model's answer, or None."""
    if not isinstance(item, dict):
        return None
    key = normalize_key(item.get("key") or item.get("name") or "")
    value = item.get("value")
    if value is None or isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False) if value else ""
    value = str(value).strip()
    if not key or not value:
        return None
    kind = str(item.get("type") or "fact").strip().lower()
    kind = _TYPE_ALIASES.get(kind, kind)
    if kind not in FACT_TYPES:
        kind = "hypothesis"  # an unknown kind is not trusted as a fact
    try:
        importance = int(float(item.get("importance", 5)))
    except (TypeError, ValueError):
        importance = 5
    importance = max(1, min(10, importance))
    return {"key": key, "value": value[:2000], "type": kind, "importance": importance}


def parse_facts(text: str) -> list[dict[str, Any]]:
    """Return the valid facts in a model's answer (the last value wins for a repeated key)."""
    data = load_json(text or "")
    if isinstance(data, dict):
        data = data.get("facts", [data] if "key" in data else [])
    if not isinstance(data, list):
        return []
    facts: dict[str, dict[str, Any]] = {}
    for item in data:
        fact = normalize_fact(item)
        if fact is not None:
            facts.pop(fact["key"], None)
            facts[fact["key"]] = fact
    return list(facts.values())[-MAX_FACTS_PER_CALL:]


async def extract_facts(
    deps: GraphDeps, owner_id: int, conversation_id: uuid.UUID, conversation: str
) -> list[dict[str, Any]]:
    """Ask the summary model for typed facts in `conversation` and merge them by key.

    A model error propagates (the caller retries the batch later); an unreadable answer
    is logged and yields no facts.
    """
    keys = await deps.memory.fact_keys(owner_id, KNOWN_KEYS_IN_PROMPT)
    prompt = prompts.FACTS_EXTRACT.format(
        keys=", ".join(keys) or "(none yet)", conversation=conversation
    )
    answer = await deps.summary_model.ainvoke(
        [SystemMessage(prompts.FACTS_SYSTEM), HumanMessage(prompt)]
    )
    facts = parse_facts(answer.text)
    if not facts:
        if answer.text.strip() not in ("[]", "{}", ""):
            logger.warning("fact extraction for %s: no readable facts in the answer", owner_id)
        return []
    await deps.memory.upsert_facts(owner_id, facts, conversation_id)
    logger.info("stored %d facts of %s from %s", len(facts), owner_id, conversation_id)
    return facts
