"""Fit a turn's request in the model's context window.

The window is planned from what the server said (src/model_windows.py). When the server
refuses a request as too long all the same (a window it never said, or a tokenizer that
counts more than ours), the refusal teaches the window and how much more the server
counts, and the same turn is planned again within it: less working memory (what leaves
it is folded into the summary first), fewer tools. A window that cannot hold even the
system prompt and the message is said as such: waiting would not help.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.tools import BaseTool

from src.config import Settings
from src.graph.tokens import TokenCounter, count_messages, count_tools
from src.model_windows import SHRINK, is_overflow, window_of_error

logger = logging.getLogger(__name__)

# Times a turn is planned again after a refusal, before it says the window is too small.
REPLANS = 3
# The tools' schemas take at most this share of a request's input budget: on a small
# window the first tools that fit are offered, the rest not.
TOOL_SHARE = 0.25
# Where a window comes from when its server said it (asked, or in a refusal).
SAID_BY_SERVER = frozenset({"props", "models", "ollama", "lmstudio", "error"})
# What the server counted for the refused request (llama-cpp-python, llama.cpp, vLLM).
_COUNTED = (
    re.compile(r"Requested tokens \((\d+)\)"),
    re.compile(r"['\"]n_prompt_tokens['\"]\s*:\s*(\d+)"),
    re.compile(r"request \((\d+) tokens\) exceeds"),
    re.compile(r"\((\d+) in the messages"),
    re.compile(r"your request has (\d+) input tokens"),
)


class WindowTooSmall(RuntimeError):
    """The model's window cannot hold even the system prompt and the user's message."""

    def __init__(self, model: str, window: int, need: int) -> None:
        super().__init__(f"{model}: a window of {window} tokens, a request needs {need}")
        self.model = model
        self.window = window
        self.need = need


def counted_by_server(exc: BaseException) -> int | None:
    """Return the tokens the server counted in the request it refused, when it says."""
    text = f"{exc} {getattr(exc, 'body', '') or ''}"
    for pattern in _COUNTED:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return None


def tools_within(tools: list[BaseTool], counter: TokenCounter, budget: int) -> list[BaseTool]:
    """Return the tools offered within `budget` tokens of schemas: all when they fit,
    else the first ones that do, in their order."""
    if count_tools(tools, counter) <= budget:
        return tools
    kept: list[BaseTool] = []
    used = 0
    for tool in tools:
        cost = count_tools([tool], counter)
        if used + cost <= budget:
            kept.append(tool)
            used += cost
    return kept


def tool_budget(settings: Settings, model: str) -> int:
    """Return the tokens the tools' schemas may take in a request to `model`."""
    total = settings.context_limit(model) - settings.llm_max_output_tokens
    return int(max(0, total) * TOOL_SHARE)


async def learned(
    settings: Settings,
    model: str,
    before: int,
    exc: BaseException,
    sent: Sequence[Any],
    tools: list[BaseTool],
    counter: TokenCounter,
) -> bool:
    """Tell whether `exc` refused the request `sent` (planned within `before` tokens) as
    too long and the settings now plan within a smaller window: the one the error says
    (the model's learner has it already), else the server's (asked now), else less than
    what was sent."""
    if not is_overflow(exc):
        return False
    book = settings.windows
    if book is None:
        return False
    estimate = count_messages(list(sent), counter) + count_tools(tools, counter)
    window = window_of_error(exc)
    if window is None:
        from src.services.window_probe import probe  # asked only when an error says nothing

        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        found = await asyncio.to_thread(probe, settings.openai_base_url, model, key)
        window = found.tokens if found is not None else int(estimate * 0.8)
    if settings.window(model).source != "error" or settings.window(model).tokens != window:
        book.learn(settings.openai_base_url, model, window)
    counted = counted_by_server(exc)
    if counted and estimate and counted > estimate:
        # The server counts more than we do: plan on the share of its window we count.
        usable = int(window * estimate / counted)
        book.plan_within(settings.openai_base_url, model, usable)
    if settings.context_limit(model) >= before:
        # Planned within this very window and refused: plan on less of it.
        book.plan_within(settings.openai_base_url, model, int(before * SHRINK))
    after = settings.context_limit(model)
    logger.warning(
        "%s refused a request of ~%d tokens (server: %s): planned within %d, was %d",
        model,
        estimate,
        counted or "?",
        after,
        before,
    )
    return after < before
