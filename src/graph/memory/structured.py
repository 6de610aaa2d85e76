"""Ask a memory model for JSON: through the endpoint's structured output when it has it.

Structured output (`response_format` with a JSON schema, via langchain's
`with_structured_output`) makes the endpoint answer in the schema. Many OpenAI-compatible
servers do not support it and answer 400; then the question is asked again as plain
text, and this process stops trying for that model. Either way the answer is read by the
tolerant parser as well, so a model that ignores the schema still yields what it can.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

from src.graph.output_caps import was_cut

logger = logging.getLogger(__name__)

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
# What a server says when it does not know `response_format` / JSON schemas.
_UNSUPPORTED = re.compile(r"response_format|json_schema|structured|schema", re.IGNORECASE)


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


def object_schema(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    """Return the JSON schema of an object of `properties`, all required, nothing else.

    Its `title` names the `response_format`; it is sent as a strict schema.
    """
    return {
        "title": name,
        "description": description,
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


class CutAnswer(ValueError):
    """The model's answer stopped at its output cap, so its JSON is incomplete."""

    def __init__(self, text: str) -> None:
        super().__init__(f"the answer was cut at the output cap after {len(text)} characters")
        self.text = text
        """What the model wrote before the cap."""


def _cut_text(exc: openai.LengthFinishReasonError) -> str:
    choices = getattr(exc.completion, "choices", None) or []
    return str(getattr(choices[0].message, "content", None) or "") if choices else ""


def _rejects_schema(exc: Exception) -> bool:
    """Tell whether an error is the endpoint refusing structured output (a 400)."""
    status = getattr(exc, "status_code", None) or getattr(
        getattr(exc, "response", None), "status_code", None
    )
    return status == 400 and bool(_UNSUPPORTED.search(str(exc)))


@dataclass
class JsonAnswers:
    """Ask models for JSON, remembering which endpoints refuse structured output."""

    enabled: bool = True
    """False (STRUCTURED_OUTPUT=off): always ask in plain text."""
    refused: set[str] = field(default_factory=set)
    """Models whose endpoint answered that it does not support structured output."""

    async def ask(
        self,
        model: BaseChatModel,
        messages: Sequence[BaseMessage],
        schema: dict[str, Any],
        config: RunnableConfig | None = None,
    ) -> tuple[Any, str]:
        """Return (the JSON value, the raw text) of the model's answer.

        `config` goes with the model calls (what they are for and whose: usage records).

        The value is None when nothing in the answer parses. An answer cut at the output
        cap raises CutAnswer. Model errors other than a refused schema propagate: the
        caller retries later.
        """
        name = str(getattr(model, "model_name", None) or type(model).__name__)
        if self.enabled and name not in self.refused:
            try:
                runnable = model.with_structured_output(
                    schema, method="json_schema", strict=True, include_raw=True
                )
            except (NotImplementedError, ValueError):
                self.refused.add(name)  # a model class without structured output
            else:
                try:
                    out = await runnable.ainvoke(list(messages), config)
                except openai.LengthFinishReasonError as exc:
                    raise CutAnswer(_cut_text(exc)) from exc
                except Exception as exc:
                    if not _rejects_schema(exc):
                        raise
                    self.refused.add(name)
                    logger.warning(
                        "model %s refused structured output (%s); asking in plain text",
                        name,
                        " ".join(str(exc).split())[:200],
                    )
                else:
                    out = out if isinstance(out, dict) else {"raw": out, "parsed": None}
                    raw = out["raw"]
                    text = raw.text if isinstance(raw, BaseMessage) else str(raw or "")
                    parsed = out.get("parsed")
                    return (parsed if parsed is not None else load_json(text)), text
        answer = await model.ainvoke(list(messages), config)
        if was_cut(answer):
            raise CutAnswer(answer.text)
        return load_json(answer.text), answer.text
