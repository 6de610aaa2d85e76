"""Chat models from settings: any OpenAI-compatible endpoint through ChatOpenAI."""

from __future__ import annotations

import asyncio
import re
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, BaseCallbackHandler
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI
from pydantic import Field, SecretStr

from src.config import ConfigError, Settings, model_configured
from src.model_windows import WindowBook, is_overflow, window_of_error

# Request fields handed to the OpenAI client as they are (see CompatibleChatOpenAI).
READY_FIELDS = ("messages", "tools")


class CompatibleChatOpenAI(ChatOpenAI):
    """ChatOpenAI that sends its output cap under the name the endpoint honours, and
    its messages and tools as the plain JSON they already are.

    langchain-openai's ChatOpenAI always sends the cap (`max_tokens`, its alias
    `max_completion_tokens`, or either as a call argument) as `max_completion_tokens`,
    which llama.cpp's server and other OpenAI-compatible servers ignore.

    The OpenAI client walks every argument of `create` against its typed signature
    before sending it: for a turn's 40 messages and the tools' schemas, about a third of
    the process's CPU per turn. ChatOpenAI has already made them plain JSON-ready dicts,
    so they go in `extra_body` (the client's documented way to send fields as they are,
    which replace the arguments of the same name) and `create` gets empty ones. A
    structured-output request (`response_format`) keeps them: the client's parsing
    reads its tools.
    """

    token_limit_param: Literal["max_tokens", "max_completion_tokens"] = "max_completion_tokens"
    """The request field that carries the output cap."""
    gate: Any = Field(default=None, exclude=True)
    """A memory model's ReplyGate (src/graph/memory/idle.py): each call waits for idle
    time, then is bounded in time; None (the chat model): calls go at once."""

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.gate is None:
            return await super()._agenerate(messages, stop, run_manager, **kwargs)
        await self.gate.wait()  # replies first
        async with asyncio.timeout(self.gate.call_seconds):  # retries included
            return await super()._agenerate(messages, stop, run_manager, **kwargs)

    def _get_request_payload(
        self, input_: LanguageModelInput, *, stop: list[str] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        messages = self._convert_input(input_).to_messages()
        if all(map(_plain, messages)):
            # Text messages, as ChatOpenAI writes them: its conversion looks at each
            # character of an answer's text for audio blocks (about a quarter of a
            # turn's CPU); the rest of the request is still its own.
            payload = super()._get_request_payload([], stop=stop, **kwargs)
            if "messages" in payload:
                payload["messages"] = [
                    {"content": m.content, "role": self._role(m)} for m in messages
                ]
            else:  # the Responses API: its own conversion
                payload = super()._get_request_payload(messages, stop=stop, **kwargs)
        else:
            payload = super()._get_request_payload(messages, stop=stop, **kwargs)
        if self.token_limit_param == "max_tokens" and "max_completion_tokens" in payload:
            payload["max_tokens"] = payload.pop("max_completion_tokens")
        if "response_format" not in payload and "messages" in payload:
            ready = {k: payload[k] for k in READY_FIELDS if k in payload}
            payload["extra_body"] = {**(payload.get("extra_body") or {}), **ready}
            payload["messages"] = []
            payload.pop("tools", None)
        return payload

    def _role(self, message: BaseMessage) -> str:
        role = PLAIN_ROLES[type(message)]
        # As ChatOpenAI does: o-series models take the system prompt as "developer".
        if role == "system" and self.model_name and re.match(r"^o\d", self.model_name):
            return "developer"
        return role


PLAIN_ROLES: dict[type[BaseMessage], str] = {
    SystemMessage: "system",
    HumanMessage: "user",
    AIMessage: "assistant",
}


def _plain(message: BaseMessage) -> bool:
    """Tell whether a message is text only: a system, user or assistant message with
    text content and nothing else (no name, tool calls or provider fields)."""
    return (
        type(message) in PLAIN_ROLES
        and isinstance(message.content, str)
        and message.name is None
        and not message.additional_kwargs
        and not getattr(message, "tool_calls", None)
        and not getattr(message, "invalid_tool_calls", None)
    )


class WindowLearner(BaseCallbackHandler):
    """Learn a model's window from the first request its server refuses as too long for
    it (every call of the model: replies and memory work), into the settings' book."""

    run_inline = True  # the book knows it before the caller sees the error

    def __init__(self, book: WindowBook, base_url: str | None, model: str) -> None:
        self.book = book
        self.base_url = base_url
        self.model = model

    def on_llm_error(self, error: BaseException, **kwargs: Any) -> None:
        if not is_overflow(error):
            return
        said = window_of_error(error)
        if said is None:
            return  # the caller looks closer (src/graph/window_fit.py)
        self.book.learn(self.base_url, self.model, said)


def make_chat_model(
    settings: Settings,
    model: str | None = None,
    temperature: float | None = None,
    callbacks: list[BaseCallbackHandler] | None = None,
    gate: Any = None,
) -> ChatOpenAI:
    """Return a ChatOpenAI for `model` (default LLM_MODEL) on the configured endpoint.

    Its replies are capped at LLM_MAX_OUTPUT_TOKENS; the memory models' calls set their
    own caps (src/graph/output_caps.py). `callbacks` see every call (the usage recorder);
    `gate`: a memory model's (see CompatibleChatOpenAI.gate).
    """
    if not model_configured(settings):
        raise ConfigError(
            "no model endpoint configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for "
            "OpenRouter, Ollama, vLLM or llama.cpp server)"
        )
    # Local servers (Ollama, llama.cpp) need no key, but the client insists on one.
    key = settings.openai_api_key or SecretStr("not-needed")
    model = model or settings.llm_model
    if settings.windows is not None:
        learner = WindowLearner(settings.windows, settings.openai_base_url, model)
        # First: LangChain awaits a call's start handlers in turn and stops at one that
        # raises (the usage recorder refusing a call over budget), leaving the handlers
        # after it as coroutines never awaited.
        callbacks = [learner, *(callbacks or [])]
    return CompatibleChatOpenAI(
        model=model,
        api_key=key,
        base_url=settings.openai_base_url,
        timeout=settings.llm_timeout,
        max_retries=settings.llm_max_retries,
        max_completion_tokens=settings.llm_max_output_tokens,
        token_limit_param=settings.token_limit_param,
        temperature=settings.llm_temperature if temperature is None else temperature,
        callbacks=callbacks,
        gate=gate,
    )


def make_summary_model(
    settings: Settings, callbacks: list[BaseCallbackHandler] | None = None, gate: Any = None
) -> ChatOpenAI:
    """Return the (cheaper) model that writes summaries and extracts facts."""
    return make_chat_model(settings, settings.effective_summary_model, 0, callbacks, gate)


def make_compact_model(
    settings: Settings, callbacks: list[BaseCallbackHandler] | None = None, gate: Any = None
) -> ChatOpenAI:
    """Return the cheap model that compacts finished sessions (seed 001)."""
    return make_chat_model(settings, settings.effective_compact_model, 0, callbacks, gate)
