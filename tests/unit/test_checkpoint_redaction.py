"""Redacting deleted memory from checkpoint values (src/storage/checkpoint_redaction.py)."""

from __future__ import annotations

import zlib

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from src.storage.checkpoint_redaction import (
    REDACTED,
    Needles,
    Redactor,
    compact_needles,
    fact_needles,
    redact_value,
)
from src.storage.checkpoint_rows import checkpoint_serde

PROMPT = (
    "You are helpful.\n<memory>\nFacts about the user:\n- diagnosis: flu\n"
    "- [preference] tea: green\n</memory>"
)


def test_each_line_holding_a_needle_is_replaced() -> None:
    needles = fact_needles([{"key": "diagnosis", "value": "flu"}])
    assert needles.redact(PROMPT) == PROMPT.replace("- diagnosis: flu", REDACTED)
    # A value over several lines (stored before values were one line) goes whole.
    two = fact_needles([{"key": "note", "value": "a\nb"}])
    assert two.redact("x\n- note: a\nb\ny") == f"x\n{REDACTED}\ny"
    assert needles.redact("nothing here") == "nothing here"


def test_needles_ignore_what_would_match_too_much() -> None:
    assert not Needles.of(["", "ab", "deleted"])
    compact = {"summary": "Talked about: the trip   to Lisbon", "last_action": "booked it"}
    assert compact_needles([compact]).texts == ("Talked about: the trip to Lisbon", "booked it")


def test_messages_are_walked_and_unchanged_values_kept_as_they_are() -> None:
    needles = fact_needles([{"key": "diagnosis", "value": "flu"}])
    call = {"name": "remember_fact", "args": {"key": "diagnosis", "value": "diagnosis: flu"}}
    value = [
        SystemMessage(PROMPT),
        HumanMessage("hi"),
        AIMessage("noted", tool_calls=[{**call, "id": "c1", "type": "tool_call"}]),
    ]
    redacted = redact_value(value, needles)
    assert "diagnosis: flu" not in repr(redacted) and REDACTED in redacted[0].content
    assert redacted[1] is value[1]
    assert isinstance(redacted[2], AIMessage) and redacted[2].tool_calls[0]["id"] == "c1"
    untouched = [HumanMessage("hi")]
    assert redact_value(untouched, needles) is untouched


def test_a_compressed_value_is_rewritten_and_reads_back() -> None:
    serde = checkpoint_serde()
    kind, blob = serde.dumps_typed([SystemMessage(PROMPT * 5)])
    assert kind.endswith("+zlib") and b"diagnosis: flu" in zlib.decompress(blob)
    redactor = Redactor(fact_needles([{"key": "diagnosis", "value": "flu"}]))
    new = redactor.rewrite(kind, blob)
    assert new is not None and new != (kind, blob) and redactor.rewritten == 1
    [message] = serde.loads_typed(new)
    assert "diagnosis: flu" not in message.content and "tea: green" in message.content
    other = serde.dumps_typed("no memory here at all, " * 20)
    assert redactor.rewrite(*other) == other
