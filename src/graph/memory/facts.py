"""Typed facts (seed 002) extracted from every session, with their own progress mark.

Facts are extracted from messages not extracted yet (`messages.facts_extracted`): after
every FACTS_EVERY user messages (after the reply), before a squash replaces messages, at
`/new` before the wipe, and when a session ends by silence (never at `/forget`: what it
forgets makes no facts). Each call reads only pending messages, in bounded batches. The
summary model is asked for JSON through structured output where the endpoint supports
it; anything else it may send (prose, code fences, a truncated array, wrong types) is
tolerated: what can be read is kept, the rest dropped. Facts merge by key, with keys
normalized so one fact does not pile up under new names (fact_keys.py), and at most
MAX_FACTS are kept per user, by importance and recency.

Facts have a history (migration 0017). The extractor is shown the current `key: value`
pairs and answers each item with an action: `add` a fact, `supersede` a known key's
value (the old value stays as the key's history, closed), or `delete` a known key (the
user asked to forget it: it goes with its history, as every delete of memory goes, see
`facts_salvage.store_facts`). A value is one line of at most 200 characters
(`memory_repo.fact_value`).

Whose words: a preference or a constraint is the user's to state, so it needs the
user's own words. The transcript the extractor reads puts each message on one line (its
line breaks collapsed) and labels it: `[user]` for what the user typed or said in a
voice note, `[shared]` for what they passed on (a document's text, a photo's
description, an audio file, a forwarded text, stored with `media: ["forward"]`),
`[assistant]` for the assistant; a tool's result is not shown to it at all (`[tool]`
lines are a placeholder), so nothing a tool returned can become a fact. So a line that starts with
`[user]:` always starts a message in the user's own words, and no document can forge
one. The prompt asks for preferences and constraints from `[user]` lines only, and the
code holds to it where it can tell: from a batch without a `[user]` line, a preference
or a constraint is stored as a hypothesis (`vet`), here and for the texts /new keeps;
the remember_fact tool does the same for a turn whose message is not the user's words.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage

from src.graph import prompts
from src.graph.deps import GraphDeps
from src.graph.memory.errors import is_refusal, log_failure
from src.graph.memory.fact_keys import normalize_key, reuse_known_keys
from src.graph.memory.fact_members import (
    attribute,
    by_member,
    is_members,
    known_line,
    member_role,
    members_in,
    own_line,
)
from src.graph.memory.facts_salvage import complete_items, settle, store_and_mark
from src.graph.memory.structured import CutAnswer, load_json, object_schema
from src.graph.memory.summarizer import summary_limits, take_segments
from src.graph.model_calls import call_config
from src.graph.output_caps import FACTS_TOKENS, with_output_cap
from src.storage.memory_repo import FACT_TYPES, fact_value

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
ACTIONS = ("add", "supersede", "delete")
_ACTION_ALIASES = {
    "new": "add",
    "set": "add",
    "insert": "add",
    "create": "add",
    "update": "supersede",
    "replace": "supersede",
    "change": "supersede",
    "correct": "supersede",
    "remove": "delete",
    "forget": "delete",
    "erase": "delete",
    "drop": "delete",
}
# What only the user's own words may set (see the module's doc).
OWN_WORDS_TYPES = frozenset({"preference", "constraint"})
# Media whose text is the user's own words: what they said in a voice note.
OWN_MEDIA = frozenset({"voice"})
SHARED_ROLE = "shared"
# What the extractor reads in place of a tool's result.
TOOL_WITHHELD = "(a tool's result, not shown)"
OWN_LINE = "[user]: "
# Any group member's line in their own words (fact_members.py).
MEMBER_LINE = "[member "
# The current facts shown to the extractor take at least this many tokens of its prompt.
KNOWN_MIN_TOKENS = 256
FACTS_SCHEMA = object_schema(
    "user_facts",
    "Durable facts about the user found in the messages.",
    {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": list(ACTIONS)},
                    "key": {"type": "string"},
                    "value": {"type": "string"},
                    "type": {"type": "string", "enum": list(FACT_TYPES)},
                    "importance": {"type": "integer"},
                },
                "required": ["action", "key", "value", "type", "importance"],
                "additionalProperties": False,
            },
        }
    },
)
# A group's text: each fact also says whose it is (fact_members.py).
GROUP_FACTS_SCHEMA = object_schema(
    "group_facts",
    "Durable facts about the group and its members found in the messages.",
    {
        "facts": {
            "type": "array",
            "items": {
                **FACTS_SCHEMA["properties"]["facts"]["items"],
                "properties": {
                    **FACTS_SCHEMA["properties"]["facts"]["items"]["properties"],
                    "whose": {"type": "string"},
                },
                "required": ["action", "key", "value", "type", "importance", "whose"],
            },
        }
    },
)


def normalize_fact(item: Any) -> dict[str, Any] | None:
    """Return a storable fact (or a key to delete) from one item of the model's answer,
    or None."""
    if not isinstance(item, dict):
        return None
    key = normalize_key(item.get("key") or item.get("name") or "")
    action = str(item.get("action") or "add").strip().lower()
    action = _ACTION_ALIASES.get(action, action)
    if action not in ACTIONS:
        action = "add"
    value = item.get("value")
    if value is None or isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False) if value else ""
    value = fact_value(value)
    if not key or not (value or action == "delete"):
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
    fact = {"key": key, "value": value, "type": kind, "importance": importance, "action": action}
    return fact | ({"whose": item["whose"]} if "whose" in item else {})


def read_facts(data: Any) -> list[dict[str, Any]]:
    """Return the valid facts in a parsed answer (the last value wins for a repeated key)."""
    if isinstance(data, dict):
        data = data.get("facts", [data] if "key" in data else [])
    if not isinstance(data, list):
        return []
    facts: dict[tuple[str, str], dict[str, Any]] = {}
    for item in data:
        fact = normalize_fact(item)
        if fact is not None:
            whose = (str(fact.get("whose") or "").strip().lower(), fact["key"])
            facts.pop(whose, None)
            facts[whose] = fact
    return list(facts.values())[-MAX_FACTS_PER_CALL:]


def parse_facts(text: str) -> list[dict[str, Any]]:
    """Return the valid facts in a model's answer text."""
    return read_facts(load_json(text or ""))


def own_words(row: dict[str, Any]) -> bool:
    """Tell whether a stored message is the user's own words: typed or spoken (a voice
    note), not a document, a photo, an audio file or a forwarded message."""
    meta = row.get("meta") or {}
    media = set(meta.get("media") or ())
    return row["role"] == "user" and not meta.get("forwarded") and media <= OWN_MEDIA


def as_read(row: dict[str, Any]) -> dict[str, Any]:
    """Return a message as the extractor reads it: on one line, and labelled `shared`
    when it is a user message but not the user's own words; a group member's labelled
    by its author (fact_members.py)."""
    if row["role"] == "tool":
        # A tool's result is data from outside (an MCP server, a web page): never the
        # extractor's to read, so no text of a tool can become a fact.
        return {**row, "content": TOOL_WITHHELD}
    lines = (" ".join(line.split()) for line in (row.get("content") or "").splitlines())
    role = SHARED_ROLE if row["role"] == "user" and not own_words(row) else row["role"]
    role = member_role(row, own_words(row)) or role
    return {**row, "role": role, "content": " / ".join(line for line in lines if line)}


def vet(facts: list[dict[str, Any]], text: str, member: int = 0) -> list[dict[str, Any]]:
    """Return the facts found in `text`; without a line in the user's own words there
    (a group member's facts: in that member's own words), preferences and constraints
    become hypotheses."""
    own = (own_line(member),) if member else (OWN_LINE, MEMBER_LINE)
    if any(line.startswith(own) for line in text.splitlines()):
        return facts
    for fact in facts:
        if fact["type"] in OWN_WORDS_TYPES:
            fact["type"] = "hypothesis"
    return facts


def found(data: Any, text: str, known: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the facts of a parsed answer about `text`, each with whose it is
    (`member`): known keys of its owner reused, vetted."""
    out: list[dict[str, Any]] = []
    for member, facts in by_member(attribute(read_facts(data), text)).items():
        keys = [r["key"] for r in known if int(r.get("member_id") or 0) == member]
        out += vet(reuse_known_keys(facts, keys), text, member)
    return out


async def known_for(deps: GraphDeps, owner_id: int, texts: Sequence[str]) -> list[dict[str, Any]]:
    """Return the current facts the extractor is shown for `texts`: the owner's own and,
    in a group, those of the members with a line in them (never another member's)."""
    members = sorted({0}.union(*(members_in(text) for text in texts)))
    limit = deps.settings.max_facts * len(members)
    return await deps.memory.list_facts(owner_id, limit, members=members)


def known_facts(deps: GraphDeps, rows: list[dict[str, Any]], group: bool = False) -> str:
    """Return the current facts as the extractor is shown them: `- key: value` lines
    (in a `group`, labelled with whose they are), most important first, within the
    summary's share of its prompt (a facts call carries no summary)."""
    budget = max(KNOWN_MIN_TOKENS, summary_limits(deps.settings).summary)
    lines: list[str] = []
    for row in rows:
        line = f"- {known_line(row, group)}{row['key']}: {fact_value(row['value'])}"
        budget -= deps.counter.count(line) + 1
        if budget < 0:
            break
        lines.append(line)
    return "\n".join(lines) or "(none yet)"


async def ask_facts(
    deps: GraphDeps,
    owner_id: int,
    conversation_id: uuid.UUID,
    text: str,
    known: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Return the facts (with their actions, and whose they are) the summary model finds
    in `text`, shown the current facts `known` (most important first); CutAnswer when
    it was cut. A group's text (its lines are members') asks whose each fact is."""
    group = bool(members_in(text))
    shown = known_facts(deps, known, group)
    prompt = prompts.FACTS_EXTRACT.format(known=shown, conversation=text)
    if group:
        prompt += "\n\n" + prompts.GROUP_FACTS_NOTE
    messages = [SystemMessage(prompts.FACTS_SYSTEM), HumanMessage(prompt)]
    model = with_output_cap(deps.summary_model, FACTS_TOKENS)
    config = call_config("facts", owner_id, conversation_id)
    schema = GROUP_FACTS_SCHEMA if group else FACTS_SCHEMA
    data, raw = await deps.json_answers.ask(model, messages, schema, config)
    facts = found(data, text, known)
    if not facts and raw.strip() not in ("[]", "{}", "") and data in (None, ""):
        logger.warning("fact extraction for %s: no readable facts in the answer", owner_id)
    return facts


@dataclass
class Batch:
    """Pending messages of one conversation, as the text one extraction call reads."""

    owner_id: int
    conversation_id: uuid.UUID
    ids: list[int]
    text: str
    """The messages as `[role]: text` lines, one per message (`as_read`); empty when
    none of them is the user's."""
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
    rows = [as_read(row) for row in rows]
    out: list[Batch] = []
    while rows:
        taken, texts = take_segments(rows, limits, deps.counter)
        has_user = any(r["role"] in ("user", SHARED_ROLE) or is_members(r["role"]) for r in taken)
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
    known = await known_for(deps, batch.owner_id, batch.texts)
    if batch.more:
        return await _extract_parts(deps, batch, known)
    try:
        facts = await ask_facts(deps, batch.owner_id, batch.conversation_id, batch.text, known)
    except CutAnswer as exc:
        salvaged = found(complete_items(exc.text), batch.text, known)
        return await _recover(deps, batch, salvaged, None)
    except Exception as exc:
        if not is_refusal(exc):
            raise
        return await _recover(deps, batch, [], exc)
    return await store_and_mark(deps, batch, facts, batch.ids)


async def _extract_parts(deps: GraphDeps, batch: Batch, known: list[dict[str, Any]]) -> int:
    """Extract facts from one long message read in parts (map), merged by key (reduce);
    stored and marked once every part was read. A part cut at the cap keeps its complete
    facts; a part the model refuses gives none (logged); other errors propagate."""
    facts: list[dict[str, Any]] = []
    for i, text in enumerate(batch.texts, 1):
        try:
            facts += await ask_facts(deps, batch.owner_id, batch.conversation_id, text, known)
        except CutAnswer as exc:
            facts += found(complete_items(exc.text), text, known)
        except Exception as exc:
            if not is_refusal(exc):
                raise
            log_failure(logger, f"fact extraction of part {i} of message {batch.ids}", exc)
    merged = {(f["member"], f["key"]): f for f in facts}  # a later part says the newer thing
    return await store_and_mark(deps, batch, list(merged.values()), batch.ids)


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
