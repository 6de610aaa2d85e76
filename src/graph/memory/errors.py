"""How memory work (summary, facts, compacts) tells its model's failures apart, and logs them.

A memory model that refuses an input will refuse the same input again: it is permanent
for that input, so the input is quarantined instead of retried every turn. A refusal is a
refusal however the provider says it: a 400 bad request, 413 too large or 422
unprocessable; or a 200 whose answer a content filter stopped (`finish_reason:
"content_filter"`, as Azure OpenAI's output filter answers, with the content empty or
cut), or that holds the model's refusal (OpenAI's `refusal` field, a refusal content
block): every memory call reads its answer through `answer_of` (plain text) or
`raise_on_refusal` (structured output), which turn those into langchain's
`ModelRefusalError`. Anything else (5xx, timeouts, lost connections, 429 rate limits,
401/403/404 that say the endpoint or the key is wrong) is transient or not the input's
fault: retried later, with a back-off. A failing memory call logs one line; its
traceback goes to DEBUG.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import openai
from langchain_core.exceptions import ModelRefusalError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

# Statuses that say "this input": the same request will be refused again.
REFUSING_STATUSES = frozenset({400, 413, 422})


def status_of(exc: BaseException) -> int | None:
    """Return the HTTP status of a model error, or None when it had none."""
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def is_refusal(exc: BaseException) -> bool:
    """Tell whether a model error refuses this input for good (see the module's doc)."""
    if isinstance(exc, openai.ContentFilterFinishReasonError | ModelRefusalError):
        return True  # withheld by the endpoint's content filter, or refused by the model
    return status_of(exc) in REFUSING_STATUSES


def is_outage(exc: BaseException) -> bool:
    """Tell whether a model error says the endpoint is down or overloaded rather than
    anything about the input or the key: a lost connection, a timeout, a 5xx or a 429."""
    if isinstance(exc, openai.APIConnectionError | TimeoutError):
        return True
    status = status_of(exc)
    return status is not None and (status >= 500 or status == 429)


def raise_on_refusal(answer: BaseMessage) -> BaseMessage:
    """Return a model's answer; raise ModelRefusalError when it is a refusal: stopped by a
    content filter (its content empty or partial) or holding the model's refusal."""
    finish = (answer.response_metadata or {}).get("finish_reason")
    if finish == "content_filter":
        raise ModelRefusalError("the answer was stopped by a content filter", raw_message=answer)
    # OpenAI's `refusal` field (whatever the message's provider tag), or a refusal block.
    said = [answer.additional_kwargs.get("refusal")]
    said += [b.get("refusal") for b in answer.content_blocks if b["type"] == "refusal"]
    if any(said) or len(said) > 1:
        text = " ".join(" ".join(dict.fromkeys(str(s) for s in said if s)).split())[:200]
        raise ModelRefusalError(f"the model refused: {text}", raw_message=answer)
    return answer


async def answer_of(
    model: BaseChatModel, messages: Sequence[BaseMessage], config: RunnableConfig | None
) -> BaseMessage:
    """Return a memory model's answer to `messages`; a refusal raises ModelRefusalError."""
    return raise_on_refusal(await model.ainvoke(list(messages), config))


def describe(exc: BaseException) -> str:
    """Return one line naming a failure: its type, status and message (at most 200 chars)."""
    status = status_of(exc)
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}{f' {status}' if status else ''}: {text}"


def log_failure(logger: logging.Logger, what: str, exc: BaseException, outcome: str = "") -> None:
    """Log a failed memory call as one warning line; its traceback at DEBUG.

    `outcome`: what was done about it, said at the end of the line.
    """
    logger.warning("%s failed: %s%s", what, describe(exc), f"; {outcome}" if outcome else "")
    logger.debug("%s failed", what, exc_info=exc)
