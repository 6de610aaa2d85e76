"""What the fake server's record of one memory-bench run shows: messages missing from
chat requests, memory calls re-sent for the same messages, the prompt prefix repeated.

Every user message carries a token `u<n>` (n: its turn) and nothing else does (the chat
model's reply is a fixed text), so a chat request shows message n when `u<n>` is in one
of its messages, and the `Ledger` (tests/memory_ledger.py) says which messages the
summary it carries stands for.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from bench.phases import repeated_prefix
from src.graph import prompts
from src.graph.tokens import PER_MESSAGE_OVERHEAD, TokenCounter
from tests.fakes.memory_model import section, transcript
from tests.fakes.openai_server import message_text
from tests.memory_ledger import TOKEN, Ledger, summary_of

# Turns listed at most in the JSON per finding (the counts are always whole).
LISTED = 50


def turn_of(token: str) -> int:
    """Return the turn of a user-message token: `u12` is turn 12's message."""
    return int(token[1:])


def missing(chat: list[dict[str, Any]], ledger: Ledger) -> dict[str, Any]:
    """Return, over all chat requests, the user messages sent so far (turns 1 to the
    request's own) that are neither in the request nor in the summary it carries."""
    latest = 0
    pairs = 0
    gone: set[str] = set()
    where: list[dict[str, Any]] = []
    for request in chat:
        current = TOKEN.findall(message_text(request["messages"][-1]))
        latest = max([latest, *(turn_of(t) for t in current if t.startswith("u"))])
        shown = {u for m in request["messages"][1:] for u in ledger.tokens(message_text(m))}
        known = shown | ledger.folded_in(request)
        lost = [u for u in (f"u{n}" for n in range(1, latest + 1)) if u not in known]
        if lost:
            pairs += len(lost)
            gone.update(lost)
            where.append({"turn": latest, "missing_turns": sorted(map(turn_of, lost))})
    return {
        "pairs": pairs,
        "messages": len(gone),
        "requests": len(where),
        "turns": sorted(map(turn_of, gone)),
        "at": where[:LISTED],
    }


def _kind_and_users(request: dict[str, Any]) -> tuple[str, list[str]]:
    """Return a memory call's kind and the user messages it reads (not those its
    summary stands for)."""
    system = message_text(request["messages"][0])
    prompt = message_text(request["messages"][-1])
    if system == prompts.SUMMARIZER_SYSTEM and "New messages:" in prompt:
        kind, text = "summary", section(prompt, "New messages:\n", "\n\nRules:")
    elif system == prompts.SUMMARIZER_SYSTEM:
        return "shorten", []
    elif system == prompts.FACTS_SYSTEM:
        kind, text = "facts", section(prompt, "Messages:\n", "\n\nAnswer with")
    else:
        return "other", []
    users = [t for role, line in transcript(text) if role == "user" for t in TOKEN.findall(line)]
    return kind, [t for t in dict.fromkeys(users) if t.startswith("u")]


def memory_calls(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """Count the memory model's calls by kind, and those re-sent: a call of a kind that
    reads a user message an earlier call of the same kind read already."""
    kinds: Counter[str] = Counter()
    resent_calls: Counter[str] = Counter()
    read: dict[str, Counter[str]] = {}
    for request in requests:
        kind, users = _kind_and_users(request)
        kinds[kind] += 1
        seen = read.setdefault(kind, Counter())
        if any(seen[u] for u in users):
            resent_calls[kind] += 1
        seen.update(users)
    resent = {
        kind: sorted(turn_of(u) for u, n in seen.items() if n > 1) for kind, seen in read.items()
    }
    return {
        "by_kind": dict(kinds),
        "resent_calls": sum(resent_calls.values()),
        "resent_calls_by_kind": dict(resent_calls),
        "resent_messages": sum(len(turns) for turns in resent.values()),
        "resent_turns": {kind: turns[:LISTED] for kind, turns in resent.items() if turns},
    }


def _oldest_user(request: dict[str, Any]) -> str | None:
    """Return the oldest user message a chat request's history holds (its token)."""
    for message in request["messages"][1:-1]:
        found = [t for t in TOKEN.findall(message_text(message)) if t.startswith("u")]
        if found:
            return found[0]
    return None


def prompts_shape(chat: list[dict[str, Any]], counter: TokenCounter) -> dict[str, Any]:
    """Return the prefix share of each chat request after the first (the share of its
    tokens repeating the previous request's from its first byte), tokens and sizes."""
    texts = [[message_text(m) for m in r["messages"]] for r in chat]
    shares = [repeated_prefix(a, b, counter) for a, b in zip(texts, texts[1:], strict=False)]
    tokens = [sum(counter.count(t) + PER_MESSAGE_OVERHEAD for t in r) for r in texts]
    # History messages: all but the system prompt and the current message.
    history = [len(r) - 2 for r in texts]
    summaries = [summary_of(r) for r in chat]
    oldest = [_oldest_user(r) for r in chat]
    return {
        "prefix_share_mean": round(statistics.fmean(shares), 3) if shares else None,
        "prefix_share_median": round(statistics.median(shares), 3) if shares else None,
        "tokens_mean": round(statistics.fmean(tokens)) if tokens else None,
        "tokens_max": max(tokens, default=None),
        "history_max": max(history, default=None),
        # What breaks the prefix: the summary in the system prompt, the window's start.
        "summary_changed": sum(a != b for a, b in zip(summaries, summaries[1:], strict=False)),
        "start_moved": sum(a != b for a, b in zip(oldest, oldest[1:], strict=False)),
        "series": {"prefix_share": [round(s, 3) for s in shares], "history": history},
    }
