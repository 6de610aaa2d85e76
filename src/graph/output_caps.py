"""Bound every model call by what its answer needs, and tell when an answer was cut.

A server that never stops (a small local model) would otherwise write until the end of
its context window on every call. The reply is capped by `LLM_MAX_OUTPUT_TOKENS`; the
memory models by the constants here, each sized for its answer.
"""

from __future__ import annotations

from typing import TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

# A compact is ~500 characters of summary, up to 10 short topics and a lastAction of at
# most 200 characters, in JSON: about 200 tokens in English, up to twice that in Russian
# with tokenizers that split Cyrillic finely. A cut answer is replaced by a plain-text
# compact like any other unusable one, so the cap only has to fit a good answer.
COMPACT_TOKENS = 500
# At most MAX_FACTS_PER_CALL (30) facts are kept from one answer, each a small JSON object
# (key, value, type, importance) of about 40 tokens.
FACTS_TOKENS = 1500
# A reminder is at most MAX_REMINDER_CHARS (600) characters: a few sentences.
REMINDER_TOKENS = 300

Model = TypeVar("Model", bound=BaseChatModel)


def summary_tokens(summary_budget: int) -> int:
    """Return the cap of one summary call: its budget and a quarter more.

    The summary is cut to its budget afterwards anyway; the extra quarter only lets the
    model finish its last sentence, so that cut falls on a sentence end.
    """
    return summary_budget + summary_budget // 4


def with_output_cap(model: Model, tokens: int) -> Model:
    """Return `model` capped at `tokens` output tokens (a copy sharing its HTTP client),
    at most its memory calls' cap (src/graph/memory/idle.py).

    Models without an output cap field (the fake chat models of unit tests) are returned
    as they are. A copy rather than `bind(max_tokens=...)`, because
    `with_structured_output` on a binding drops the bound arguments.
    """
    if "max_tokens" not in type(model).model_fields:
        return model
    gate = getattr(model, "gate", None)  # a memory model's: MEMORY_MAX_OUTPUT_TOKENS
    if gate is not None and gate.max_output_tokens:
        tokens = min(tokens, gate.max_output_tokens)
    return model.model_copy(update={"max_tokens": tokens})


def was_cut(answer: BaseMessage) -> bool:
    """Tell whether the model stopped at the output cap (`finish_reason: length`)."""
    return (answer.response_metadata or {}).get("finish_reason") == "length"
