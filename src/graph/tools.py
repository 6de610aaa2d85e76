"""Tools the model can call. The user's identity comes from the graph state, never from
the model's arguments: every tool reads `user_id` from the injected state, so the fact
tools change the current owner's facts only; in a group, those of the member who wrote
the turn's message (`member_id`, from the update's author)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import date, datetime, time, timedelta
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

import numpy as np
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import InjectedState

from src.graph.context.render import RELAYS, relaying, when_local
from src.graph.context.sections import compact_line
from src.graph.deps import GraphDeps
from src.graph.memory.epoch import delete_in_turn, started
from src.graph.memory.fact_keys import find_key, normalize_key
from src.graph.memory.facts import OWN_WORDS_TYPES, own_words
from src.graph.rights import Action, may, refusal, role_of
from src.graph.timestamps import strip_stamp, turn_zone
from src.storage.epochs import still_holds
from src.storage.erasure_repo import FactKey
from src.storage.memory_repo import fact_value
from src.storage.search_bm25 import StopWordsOnly
from src.storage.search_day import Span
from src.storage.search_ranking import SemanticQuery

logger = logging.getLogger(__name__)

# Characters of one found message shown to the model.
SEARCH_SNIPPET_CHARS = 500
# A hit's next message is shown when it is at most this long.
NEIGHBOUR_CHARS = 300
# A query embedding that takes longer than this is given up: lexical search answers.
QUERY_EMBED_SECONDS = 5.0
# A fact the user asked to remember matters in most answers.
TOOL_FACT_IMPORTANCE = 8
# Known keys named back to the model when it asks to forget an unknown one.
KEYS_SHOWN = 50

State = Annotated[dict[str, Any], InjectedState]
FactType = Literal["fact", "preference", "hypothesis", "constraint"]
Scope = Literal["topic", "chat"]
# Said with what a search or a recall in the current topic found, when the chat has other
# topics: the wider search is the model's explicit choice, never silent.
TOPIC_SCOPE_NOTE = (
    "(Searched this topic of the chat only; its other topics were not searched. "
    'Call again with scope="chat" to search all of them.)\n'
)


async def topic_scope(
    deps: GraphDeps, state: dict[str, Any], scope: Scope
) -> tuple[list[uuid.UUID] | None, bool]:
    """Return the conversations a search in `scope` covers (None: all the owner's, the
    chat's) and whether the chat has conversations outside them (other topics)."""
    if scope == "chat" or not state.get("conversation_id"):
        return None, False
    owner = state["user_id"]
    row = await deps.conversations.get_conversation(uuid.UUID(str(state["conversation_id"])))
    topic = int(row["topic_id"]) if row is not None else 0
    inside = await deps.conversations.conversation_ids(owner, topic=topic)
    return inside, len(await deps.conversations.conversation_ids(owner)) > len(inside)


def format_compacts(rows: list[dict[str, Any]], zone: ZoneInfo) -> str:
    """Render session compacts as the model reads them, oldest first, dated in `zone`."""
    if not rows:
        return "No previous conversations are remembered."
    lines = [compact_line(row, zone) for row in reversed(rows)]
    return "Previous conversations (oldest first):\n" + "\n".join(lines)


def format_found(rows: list[dict[str, Any]], query: str, zone: ZoneInfo) -> str:
    """Render found messages with date (in `zone`), role and `#number`, best match first.

    A hit's next message is shown when it is short: a question's answer is often there.
    """
    if not rows:
        return f"Nothing found for {query!r}."
    lines = []
    for row in rows:
        mark = " (compressed out of the conversation)" if row.get("squashed") else ""
        mark += f" ({relaying(row)})" if relaying(row) else ""
        when = when_local(row["created_at"], zone)
        text = _snippet(strip_stamp(row["content"]))
        lines.append(f"- {when} #{row['number']} {row['role']}{mark}: {text}")
        after = " ".join(strip_stamp(row.get("next_content") or "").split())
        if after and len(after) <= NEIGHBOUR_CHARS:
            lines.append(f"  next, #{row['next_number']} {row['next_role']}: {after}")
    return f"Found {len(rows)} message(s) for {query!r}, best match first:\n" + "\n".join(lines)


def format_span(rows: list[dict[str, Any]], span: Span, limit: int, zone: ZoneInfo) -> str:
    """Render the messages of the time a query named and nothing else, newest first,
    dated in `zone`, saying that they are that time's messages (not matches of its words)."""
    first = span.since.astimezone(zone).date() if span.since else None
    # `until` is exclusive: the day before it is the last one listed.
    last = (span.until - timedelta(microseconds=1)).astimezone(zone).date() if span.until else None
    if first == last:
        when = f"on {first}"
    else:
        when = " ".join(x for x in (first and f"from {first}", last and f"to {last}") if x)
    if not rows:
        return f"No messages {when}."
    more = f" (the newest {limit}: call with a larger limit for more)" if len(rows) >= limit else ""
    lines = [
        f"- {when_local(r['created_at'], zone)} #{r['number']} {r['role']}"
        f"{' (compressed out of the conversation)' if r.get('squashed') else ''}"
        f"{f' ({relaying(r)})' if relaying(r) else ''}: "
        f"{_snippet(strip_stamp(r['content']))}"
        for r in rows
    ]
    head = f"The messages {when}, {len(rows)} of them{more}, newest first:"
    return head + "\n" + "\n".join(lines)


def _snippet(content: str) -> str:
    text = " ".join((content or "").split())
    return text[:SEARCH_SNIPPET_CHARS] + " …" if len(text) > SEARCH_SNIPPET_CHARS else text


def semantic_query(deps: GraphDeps) -> SemanticQuery | None:
    """Return how the search embeds its query (made while it reads the owner's index and
    vectors; a long query as its content words); None when embeddings are off.

    A failing or slow embedding provider never fails the search: the embedding comes out
    None, lexical search answers alone, and the log says why.
    """
    embedder = deps.embedder
    if embedder is None:
        return None

    async def embed(text: str) -> np.ndarray | None:
        try:
            return await asyncio.wait_for(embedder.query(text), QUERY_EMBED_SECONDS)
        except Exception as exc:  # any provider failure: search without embeddings
            logger.warning("search without embeddings: %s: %s", type(exc).__name__, exc)
            return None

    return SemanticQuery(embed, embedder.model)


def local_day(value: str | None, zone: ZoneInfo, end: bool = False) -> datetime | None:
    """Return the start of a `YYYY-MM-DD` day in `zone` (with `end`, of the day after)."""
    if not value:
        return None
    try:
        day = date.fromisoformat(value.strip()[:10])
    except ValueError:
        raise ValueError(f"dates are YYYY-MM-DD, not {value!r}") from None
    start = datetime.combine(day, time.min, tzinfo=zone)
    return start + timedelta(days=1) if end else start


def make_memory_tools(deps: GraphDeps) -> list[BaseTool]:
    """Build the memory tools bound to the injected repositories."""

    @tool
    async def recall_previous_conversations(
        state: Annotated[dict[str, Any], InjectedState],
        scope: Scope = "topic",
    ) -> str:
        """Recall short summaries of the user's previous conversations with you: when,
        what about, topics and the last thing done.

        Use it when the user asks what you talked about before, or refers to an earlier
        conversation that is not in the current one.

        Args:
            scope: "topic" (default): the current topic of the chat only; "chat": every
                topic of this chat.
        """
        inside, narrowed = await topic_scope(deps, state, scope)
        current = uuid.UUID(str(state["conversation_id"])) if inside is not None else None
        rows = await deps.memory.list_compacts(
            state["user_id"], deps.settings.max_compacts, conversation_id=current
        )
        zone = turn_zone(state, deps.settings)
        return (TOPIC_SCOPE_NOTE if narrowed else "") + format_compacts(rows, zone)

    @tool
    async def search_history(
        query: str,
        state: Annotated[dict[str, Any], InjectedState],
        limit: int = 10,
        since: str | None = None,
        until: str | None = None,
        role: Literal["user", "assistant"] | None = None,
        scope: Scope = "topic",
    ) -> str:
        """Search everything the user and you said in stored conversations, including
        parts that are no longer in your context, and return matching messages with
        their dates and numbers (#17), best match first; a short next message is shown
        with each hit (a question's answer is often there).

        Args:
            query: the words to look for: names, places, things (any of them matches;
                Russian and English word forms are matched, e.g. "кот" finds "коты";
                end a word with * to match its beginning, e.g. "ноут*"). A relative date
                in it ("last Tuesday", "two weeks ago", "в марте") ranks that time first;
                a date alone ("what happened yesterday?") lists that day's messages.
            limit: how many messages to return at most (1-50).
            since: only messages from this day on, YYYY-MM-DD in the user's time zone.
            until: only messages up to this day, inclusive, YYYY-MM-DD.
            role: only the user's messages ("user") or only yours ("assistant").
            scope: "topic" (default): the current topic of the chat only; "chat": every
                topic of this chat (only when the user asks about another topic).
        """
        if not query.strip():
            return "The query is empty: say what to look for."
        zone = turn_zone(state, deps.settings)
        inside, narrowed = await topic_scope(deps, state, scope)
        try:
            found = await deps.search.find(
                state["user_id"],
                query,
                limit,
                exclude_id=state.get("input_message_id"),
                since=local_day(since, zone),
                until=local_day(until, zone, end=True),
                role=role,
                semantic=semantic_query(deps),
                scope=inside,
                now=deps.clock().astimezone(zone),
            )
        except StopWordsOnly:
            return (
                f"The query {query!r} has only common words, which match everything. "
                "Search for something specific: a name, a place, a thing, a number."
            )
        note = TOPIC_SCOPE_NOTE if narrowed else ""
        # A reply that relays an MCP tool's output is marked as such.
        relays = await deps.conversations.relays_of(
            state["user_id"], [r["id"] for r in found.rows if r["role"] == "assistant"]
        )
        for row in found.rows:
            if row["id"] in relays:
                row["meta"] = {**(row.get("meta") or {}), RELAYS: relays[row["id"]]}
        if found.span is not None:
            return note + format_span(found.rows, found.span, max(1, min(50, limit)), zone)
        return note + format_found(found.rows, query, zone)

    return [recall_previous_conversations, search_history]


async def said_by_user(deps: GraphDeps, state: dict[str, Any]) -> bool:
    """Tell whether the turn's message is the user's own words (not a document, a
    photo or a forward): a preference or a constraint needs them."""
    conversation, message = state.get("conversation_id"), state.get("input_message_id")
    if not conversation or message is None:
        return False
    row = await deps.conversations.message(uuid.UUID(str(conversation)), message)
    return row is not None and own_words(row)


def make_fact_tools(deps: GraphDeps) -> list[BaseTool]:
    """Build remember_fact and forget_fact, bound to the injected repositories."""

    @tool
    async def remember_fact(key: str, value: str, type: FactType, state: State) -> str:
        """Remember a fact about the user (in a group: the member writing now) for all
        later conversations, or correct one you remember: a new value for a known key
        replaces it (the old one is kept as its history). Use it when the user asks you
        to remember something about them, or corrects what you know.

        Args:
            key: a short snake_case name of what it is about (city, job, allergy); the
                known key when you correct a fact.
            value: the fact, one short line in the user's language.
            type: fact = confirmed data; preference = what the user likes or wants;
                hypothesis = a guess; constraint = a limit the user set (budget,
                deadline, allergy). Preferences and constraints only from the user's
                own words, never from a document or a forwarded text.
        """
        if not may(role_of(state), Action.OWN_FACTS):
            return refusal(role_of(state), Action.OWN_FACTS)
        owner, member = state["user_id"], state.get("member_id") or 0
        known = await deps.memory.fact_keys(owner, None, member=member)
        name = find_key(key, known) or normalize_key(key)
        if not name or not fact_value(value):
            return "Error: a fact needs a key and a value."
        kind: str = type
        if kind in OWN_WORDS_TYPES and not await said_by_user(deps, state):
            kind = "hypothesis"  # a document's or a forward's words are not the user's say
        source = state.get("conversation_id")
        fact = {"key": name, "value": value, "type": kind, "importance": TOOL_FACT_IMPORTANCE}
        async with deps.conversations.pool.connection() as conn, conn.transaction():
            # A group's turn does not hold its members' locks: a member's /erase may
            # have come since the turn began (src/graph/memory/epoch.py).
            if not await still_holds(conn, started(owner)):
                return "Error: this memory was just deleted; nothing was remembered."
            await deps.memory.upsert_facts(
                owner,
                [fact],
                uuid.UUID(str(source)) if source else None,
                keep=deps.settings.max_facts,
                conn=conn,
                member=member,
            )
        return f"Remembered ({kind}) {name}: {fact_value(value)}"

    @tool
    async def forget_fact(key: str, state: State) -> str:
        """Forget a fact you remember about the user (in a group: the member writing now),
        with its earlier values. Use it
        when the user asks you to forget something about them ("forget my address").

        Args:
            key: the fact's key, as it appears in what you know about the user.
        """
        if not may(role_of(state), Action.OWN_FACTS):
            return refusal(role_of(state), Action.OWN_FACTS)
        owner, member = state["user_id"], state.get("member_id") or 0
        known = await deps.memory.fact_keys(owner, None, member=member)
        name = find_key(key, known)
        gone = FactKey(name, member) if name is not None else None
        if gone is None or not (await delete_in_turn(deps, owner, gone)).facts:
            keys = ", ".join(known[:KEYS_SHOWN]) or "none"
            return f"No fact called {key!r} is remembered. Known keys: {keys}."
        return f"Forgot {name}."

    return [remember_fact, forget_fact]
