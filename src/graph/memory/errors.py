"""How memory work (summary, facts, compacts) tells its model's failures apart, and logs them.

A memory model that refuses an input (400 bad request, 413 too large, 422 unprocessable,
an answer withheld by a content filter) will refuse the same input again: it is
permanent for that input, so the input is quarantined instead of retried every turn.
Anything else (5xx, timeouts, lost connections, 429 rate limits, 401/403/404 that say
the endpoint or the key is wrong) is transient or not the input's fault: retried later,
with a back-off. A failing memory call logs one line; its traceback goes to DEBUG.
"""

from __future__ import annotations

import logging

import openai

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
    if isinstance(exc, openai.ContentFilterFinishReasonError):
        return True  # the answer was withheld by the endpoint's content filter
    return status_of(exc) in REFUSING_STATUSES


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
