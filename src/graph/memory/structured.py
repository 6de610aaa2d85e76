"""Ask a memory model for JSON: through the endpoint's structured output when it has it.

Three ways to ask, best first (`MODES`): `response_format` with a strict JSON schema
(langchain's `with_structured_output(method="json_schema")`), JSON mode (`json_object`,
no schema: what llama-cpp-python and many OpenAI-compatible servers offer), and plain
text. An endpoint that refuses a `response_format` (any 4xx or 5xx whose message is about
it: llama-cpp-python answers a JSON schema with a 500 "Input should be 'text' or
'json_object'") is asked again the next way, and the way that works is remembered per
endpoint and model, so later calls go straight to it. Any other error propagates: a
transient 500 demotes nothing. Whichever way, the answer is read by the tolerant parser
as well, so a model that ignores the schema still yields what it can.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from langchain_core.exceptions import ModelRefusalError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig

from src.graph.memory.errors import answer_of, describe, raise_on_refusal, status_of
from src.graph.output_caps import was_cut

logger = logging.getLogger(__name__)

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
# What a server says when it does not know `response_format` or one of its types.
_UNSUPPORTED = re.compile(
    r"response_format|json_schema|json_object|structured|schema|'text'", re.IGNORECASE
)
# The ways of asking for JSON, best first.
MODES = ("json_schema", "json_object", "text")


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


def refuses_format(exc: BaseException) -> bool:
    """Tell whether an error is the endpoint refusing the request's `response_format`.

    Any HTTP error status counts when its message names the format: servers answer
    400, 422 or (llama-cpp-python's pydantic validation) 500.
    """
    status = status_of(exc)
    return status is not None and status >= 400 and bool(_UNSUPPORTED.search(str(exc)))


def endpoint_of(model: BaseChatModel) -> tuple[str, str]:
    """Return what a model's structured-output support is remembered by: (base URL, name)."""
    base = getattr(model, "openai_api_base", None) or getattr(
        getattr(model, "root_client", None), "base_url", None
    )
    name = getattr(model, "model_name", None) or type(model).__name__
    return str(base or "").rstrip("/"), str(name)


def _mentions_json(messages: Sequence[BaseMessage]) -> bool:
    # JSON mode needs the word in the messages (OpenAI answers 400 otherwise).
    return any("json" in m.text.lower() for m in messages)


def _structured(model: BaseChatModel, schema: dict[str, Any], mode: str) -> Runnable[Any, Any]:
    """Return `model` asking for JSON in `mode` (raises for a class without it)."""
    if mode == "json_schema":
        return model.with_structured_output(
            schema, method="json_schema", strict=True, include_raw=True
        )
    return model.with_structured_output(schema, method="json_mode", include_raw=True)


async def _ask_structured(
    runnable: Runnable[Any, Any], messages: Sequence[BaseMessage], config: RunnableConfig | None
) -> tuple[Any, str]:
    """Return (the JSON value, the raw text) of a structured answer; CutAnswer if cut."""
    try:
        out = await runnable.ainvoke(list(messages), config)
    except openai.LengthFinishReasonError as exc:
        raise CutAnswer(_cut_text(exc)) from exc
    out = out if isinstance(out, dict) else {"raw": out, "parsed": None}
    raw = out["raw"]
    if isinstance(raw, BaseMessage):
        raise_on_refusal(raw)
    if isinstance(out.get("parsing_error"), ModelRefusalError):
        raise out["parsing_error"]  # langchain read a refusal: not a parsing problem
    text = raw.text if isinstance(raw, BaseMessage) else str(raw or "")
    if isinstance(raw, BaseMessage) and was_cut(raw):
        raise CutAnswer(text)  # a parser would "repair" the cut JSON: never trust it
    parsed = out.get("parsed")
    return (parsed if parsed is not None else load_json(text)), text


@dataclass
class JsonAnswers:
    """Ask models for JSON, remembering how each endpoint and model can be asked."""

    enabled: bool = True
    """False (STRUCTURED_OUTPUT=off): always ask in plain text."""
    modes: dict[tuple[str, str], str] = field(default_factory=dict)
    """The mode (of MODES) each (base URL, model name) is asked in, once one was refused."""

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
        cap raises CutAnswer. Model errors other than a refused `response_format`
        propagate: the caller retries later.
        """
        key = endpoint_of(model)
        mode = self.modes.get(key, MODES[0]) if self.enabled else "text"
        while mode != "text":
            if mode == "json_object" and not _mentions_json(messages):
                break  # this prompt cannot use JSON mode; another one may
            try:
                runnable = _structured(model, schema, mode)
            except (NotImplementedError, ValueError):
                mode = self._remember(key, "text")  # a model class without it
                continue
            try:
                return await _ask_structured(runnable, messages, config)
            except CutAnswer:
                raise
            except Exception as exc:
                if not refuses_format(exc):
                    raise
                mode = self._demote(key, mode, exc)
        answer = await answer_of(model, messages, config)
        if was_cut(answer):
            raise CutAnswer(answer.text)
        return load_json(answer.text), answer.text

    def _remember(self, key: tuple[str, str], mode: str) -> str:
        """Remember `mode` for `key` unless a later one is known; return the one known."""
        known = self.modes.get(key, MODES[0])
        self.modes[key] = max(known, mode, key=MODES.index)
        return self.modes[key]

    def _demote(self, key: tuple[str, str], mode: str, exc: BaseException) -> str:
        """Remember that `key` refused `mode`, say so once, and return the next mode."""
        following = MODES[MODES.index(mode) + 1]
        if self.modes.get(key, MODES[0]) == mode:  # concurrent calls: one warning
            logger.warning(
                "model %s at %s refused response_format %s (%s); asking with %s from now on",
                key[1],
                key[0] or "its default endpoint",
                mode,
                describe(exc),
                following,
            )
        return self._remember(key, following)
