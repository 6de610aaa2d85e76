"""Typed facts (seed 002) extracted from every session, with their own progress mark.

Facts are extracted from messages not extracted yet (`messages.facts_extracted`): after
every FACTS_EVERY user messages (after the reply), before a squash replaces messages, at
`/new` before the wipe, and when a session ends by silence. Each call reads only pending
messages, in bounded batches. The summary model is asked for JSON through structured
output where the endpoint supports it; anything else it may send (prose, code fences, a
truncated array, wrong types) is tolerated: what can be read is kept, the rest dropped.
Facts merge by key, with keys normalized so one fact does not pile up under new names,
and at most MAX_FACTS are kept per user, by importance and recency.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage

from src.graph import prompts
from src.graph.deps import GraphDeps
from src.graph.memory.errors import is_refusal, log_failure
from src.graph.memory.facts_salvage import complete_items, settle, store_and_mark
from src.graph.memory.structured import CutAnswer, load_json, object_schema
from src.graph.memory.summarizer import summary_limits, take_segments
from src.graph.model_calls import call_config
from src.graph.output_caps import FACTS_TOKENS, with_output_cap
from src.storage.memory_repo import FACT_TYPES

logger = logging.getLogger(__name__)

MAX_FACTS_PER_CALL = 30
# Batches per extraction run at most: catches up after a backlog without running long.
MAX_ROUNDS = 3
# Pending messages read at most before a /new wipe: several batches' worth.
WIPE_READ_LIMIT = 200
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
_NOT_KEY = re.compile(r"[^\w]+")
_POSSESSIVE = re.compile(r"['’]s\b")
# Words that only say the fact is about the user: `user_name` and `name` are one key.
_OWNER_WORDS = frozenset(
    {"user", "users", "the", "my", "his", "her", "their", "пользователь", "пользователя", "мой"}
)
FACTS_SCHEMA = object_schema(
    "user_facts",
    "Durable facts about the user found in the messages.",
    {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "key": {"type": "string"},
                    "value": {"type": "string"},
                    "type": {"type": "string", "enum": list(FACT_TYPES)},
                    "importance": {"type": "integer"},
                },
                "required": ["key", "value", "type", "importance"],
                "additionalProperties": False,
            },
        }
    },
)


def normalize_key(key: Any) -> str:
    """Return a fact key as `snake_case` (any script) without owner words, at most 64 chars."""
    text = _POSSESSIVE.sub("", str(key).strip().lower())
    words = [w for w in _NOT_KEY.sub("_", text).split("_") if w]
    kept = [w for w in words if w not in _OWNER_WORDS] or words
    return "_".join(kept)[:64]


def key_signature(key: str) -> str:
    """Return what two keys for the same thing share: words without plural `s`, in order."""
    return "".join(w[:-1] if len(w) > 3 and w.endswith("s") else w for w in key.split("_"))


def reuse_known_keys(facts: list[dict[str, Any]], known: Sequence[str]) -> list[dict[str, Any]]:
    """Give each fact the known key of the same signature, so its value is replaced."""
    by_signature = {key_signature(k): k for k in known}
    for fact in facts:
        fact["key"] = by_signature.get(key_signature(fact["key"]), fact["key"])
    return facts


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


def read_facts(data: Any) -> list[dict[str, Any]]:
    """Return the valid facts in a parsed answer (the last value wins for a repeated key)."""
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


def parse_facts(text: str) -> list[dict[str, Any]]:
    """Return the valid facts in a model's answer text."""
    return read_facts(load_json(text or ""))


@dataclass
class Batch:
    """Pending messages of one conversation, as the text one extraction call reads."""

    owner_id: int
    conversation_id: uuid.UUID
    ids: list[int]
    text: str
    """The messages as `[role]: text` lines; empty when none of them is the user's."""
    more: list[str] = field(default_factory=list)
    """A message longer than one call is read in parts: `text` is the first, these the
    rest (each its own call); the message is marked once every part was read."""

    @property
    def texts(self) -> list[str]:
        """Every text of the batch, one per model call."""
        return [self.text, *self.more] if self.text else []


def batches(
    deps: GraphDeps, owner_id: int, conversation_id: uuid.UUID, rows: list[dict[str, Any]]
) -> list[Batch]:
    """Split pending rows, oldest first, into batches of the summarizer's size.

    A batch without a user message is marked without asking the model: what the
    assistant said alone says nothing new about the user.
    """
    limits = summary_limits(deps.settings)
    out: list[Batch] = []
    while rows:
        taken, texts = take_segments(rows, limits, deps.counter)
        has_user = any(r["role"] == "user" for r in taken)
        ids = [r["id"] for r in taken]
        first, *more = texts if has_user else [""]
        out.append(Batch(owner_id, conversation_id, ids, first, more))
        rows = rows[len(taken) :]
    return out


async def read_pending(
    deps: GraphDeps,
    owner_id: int,
    conversation_id: uuid.UUID,
    only: Sequence[int] | None = None,
    limit: int | None = None,
) -> list[Batch]:
    """Return the conversation's messages awaiting extraction as batches, oldest first.

    `only`: just these message ids (a run about to be squashed).
    """
    limit = limit or MAX_ROUNDS * max(3 * deps.settings.facts_every, 30)
    rows = await deps.conversations.facts_pending(conversation_id, limit)
    if only is not None:
        wanted = set(only)
        rows = [r for r in rows if r["id"] in wanted]
    return batches(deps, owner_id, conversation_id, rows)


async def extract_batch(deps: GraphDeps, batch: Batch) -> int:
    """Extract facts from one batch, store them and mark what they came from; return facts stored.

    Nothing is marked unless its content survived. An answer cut at its output cap keeps
    its complete facts and the messages are asked about again in halves; an input the
    model refuses for good (errors.py) is found by halving and marked without facts.
    Any other model error propagates with the batch unmarked, so it is tried again
    later; an unreadable answer is logged and marks the batch (it would be as
    unreadable again).
    """
    if not batch.text:
        return await store_and_mark(deps, batch, [], batch.ids)
    keys = await deps.memory.fact_keys(batch.owner_id, deps.settings.max_facts)
    if batch.more:
        return await _extract_parts(deps, batch, keys)
    try:
        facts = await _ask_facts(deps, batch, keys)
    except CutAnswer as exc:
        salvaged = reuse_known_keys(read_facts(complete_items(exc.text)), keys)
        return await _recover(deps, batch, salvaged, None)
    except Exception as exc:
        if not is_refusal(exc):
            raise
        return await _recover(deps, batch, [], exc)
    return await store_and_mark(deps, batch, facts, batch.ids)


async def _extract_parts(deps: GraphDeps, batch: Batch, keys: list[str]) -> int:
    """Extract facts from one long message read in parts (map), merged by key (reduce);
    stored and marked once every part was read. A part cut at the cap keeps its complete
    facts; a part the model refuses gives none (logged); other errors propagate."""
    found: list[dict[str, Any]] = []
    for i, text in enumerate(batch.texts, 1):
        part = Batch(batch.owner_id, batch.conversation_id, batch.ids, text)
        try:
            found += await _ask_facts(deps, part, keys)
        except CutAnswer as exc:
            found += reuse_known_keys(read_facts(complete_items(exc.text)), keys)
        except Exception as exc:
            if not is_refusal(exc):
                raise
            log_failure(logger, f"fact extraction of part {i} of message {batch.ids}", exc)
    merged = {f["key"]: f for f in found}  # a later part says the newer thing
    return await store_and_mark(deps, batch, list(merged.values()), batch.ids)


async def _ask_facts(deps: GraphDeps, batch: Batch, keys: list[str]) -> list[dict[str, Any]]:
    """Return the facts the summary model finds in the batch (CutAnswer when cut)."""
    prompt = prompts.FACTS_EXTRACT.format(
        keys=", ".join(keys) or "(none yet)", conversation=batch.text
    )
    messages = [SystemMessage(prompts.FACTS_SYSTEM), HumanMessage(prompt)]
    model = with_output_cap(deps.summary_model, FACTS_TOKENS)
    config = call_config("facts", batch.owner_id, batch.conversation_id)
    data, raw = await deps.json_answers.ask(model, messages, FACTS_SCHEMA, config)
    facts = reuse_known_keys(read_facts(data), keys)
    if not facts and raw.strip() not in ("[]", "{}", "") and data in (None, ""):
        logger.warning("fact extraction for %s: no readable facts in the answer", batch.owner_id)
    return facts


async def _recover(
    deps: GraphDeps, batch: Batch, salvaged: list[dict[str, Any]], refusal: BaseException | None
) -> int:
    """After a cut answer or a `refusal`: ask about the messages again in halves; a batch
    that cannot be split keeps what was salvaged and is marked (facts_salvage.py)."""
    halves = await _halves(deps, batch)
    if halves is None:
        return await settle(deps, batch, salvaged, refusal)
    # Stored now, marked by the halves: a transient failure of theirs loses none of it.
    stored = await store_and_mark(deps, batch, salvaged, [])
    for half in halves:
        stored += await extract_batch(deps, half)
    return stored


async def _halves(deps: GraphDeps, batch: Batch) -> list[Batch] | None:
    """Return the batch's messages as the batches of its two halves, first half first.

    None when it cannot be split: one message, or none of them pending any more. The
    halves are read again, so each is rendered as any batch is; a message extracted
    meanwhile drops out. Earlier batches were extracted first, so the batch lies within
    the first WIPE_READ_LIMIT pending messages (the most any caller reads).
    """
    if len(batch.ids) < 2:
        return None
    middle = len(batch.ids) // 2
    halves: list[Batch] = []
    for ids in (batch.ids[:middle], batch.ids[middle:]):
        halves += await read_pending(
            deps, batch.owner_id, batch.conversation_id, only=ids, limit=WIPE_READ_LIMIT
        )
    return halves or None


async def extract_pending(
    deps: GraphDeps,
    owner_id: int,
    conversation_id: uuid.UUID,
    only: Sequence[int] | None = None,
) -> int:
    """Extract facts from the conversation's pending messages (at most MAX_ROUNDS batches).

    Returns how many facts were stored. A model error stops here and propagates; what
    was done before it stays done.
    """
    stored = 0
    for batch in (await read_pending(deps, owner_id, conversation_id, only))[:MAX_ROUNDS]:
        stored += await extract_batch(deps, batch)
    return stored
