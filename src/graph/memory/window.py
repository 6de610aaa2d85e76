"""Which stored messages a request carries, and which the summary must fold before they leave.

The invariant (README, docs): every message of the conversation since the last `/new` and
not forgotten is, at every model request, either in that request's working memory or
already folded into the running summary the request carries.

- The window (seed 000): the last `size` messages (MAX_CONTEXT, fewer after `/forget`),
  fewer only when the token budget binds. With WINDOW_STEP = N > 1 its start moves in
  steps of N message numbers, so the prompt's prefix stays the same for N/2 turns (a
  prompt cache reuses it); it still never holds more than `size` messages.
- Lag: a message older than the window that the summary has not folded yet (its model
  is down, slow or refusing) stays in the prompt after all, beyond `size`, and is logged;
  at most four times `size` of them (`LAG_FACTOR`). Past that, or past the token budget, the turn
  folds them itself before the model call (`build_context`).
- Fold ahead: the summary folds a message while it is still in the window, once it is
  older than the newest `keep` messages (and tokens), so that a normal summary model has
  finished before the message leaves: messages leave the prompt already summarized.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]
Cost = Callable[[Row], int]

# Lagging messages shown beyond the window, at most, as a multiple of the window.
LAG_FACTOR = 4


def window_size(active_messages_count: int | None, max_context: int) -> int:
    """Return how many stored messages enter the context (seed 000): MAX_CONTEXT, or
    after /forget the messages stored since (`active_messages_count`), at most that."""
    if active_messages_count is None:
        return max_context
    return max(0, min(active_messages_count, max_context))


def window_count(user: Row | None, conversation: Row | None) -> int | None:
    """Return seed 000's count after /forget for a conversation: the owner's in the
    General topic and chats without topics, the conversation's own in a topic (0026)."""
    if conversation is not None and conversation.get("topic_id"):
        return conversation.get("active_messages_count")
    return user["active_messages_count"] if user else None


@dataclass(frozen=True)
class WindowRule:
    """How one conversation's window is cut, and when its summary folds."""

    size: int
    """Seed 000's window: MAX_CONTEXT, or fewer after /forget (0: nothing)."""
    working: int
    """Tokens working memory holds when the other layers use their whole shares."""
    trigger: int = 10
    """SUMMARY_TRIGGER: the batch a fold waits for, at most."""
    step: int = 1
    """WINDOW_STEP: the window's start moves by this many message numbers at a time."""
    limit: int = 0
    """MAX_CONTEXT (0: `size`): after /forget the window grows back to it, and a message
    leaves it only then, so folds are planned against it."""

    @property
    def full(self) -> int:
        """The window's size once it has grown back to MAX_CONTEXT."""
        return self.limit or self.size

    @property
    def batch(self) -> int:
        """Messages a fold waits for: SUMMARY_TRIGGER, at most a third of the window."""
        return max(1, min(self.trigger, self.full // 3))

    @property
    def leave_at(self) -> int:
        """The fewest newest messages the full window shows (a step may hide the rest)."""
        return max(1, self.full - self.step + 1)

    @property
    def keep(self) -> int:
        """Newest messages never folded yet: the rest of the window is folded ahead."""
        return max(0, self.leave_at - 2 * self.batch)


def newest_within(rows: Sequence[Row], count: int, tokens: int, cost: Cost) -> int:
    """Return how many of the newest rows fit in both `count` messages and `tokens`."""
    used = kept = 0
    for row in reversed(rows):
        if kept >= count:
            break
        used += cost(row)
        if used > tokens:
            break
        kept += 1
    return kept


def in_window(rows: Sequence[Row], rule: WindowRule) -> list[Row]:
    """Return the window of `rows` (thread order, the current message excluded): the last
    `size`, starting at a multiple of `step` in message numbers when stepping."""
    if rule.size <= 0:
        return []
    last = list(rows[-rule.size :])
    if rule.step <= 1 or len(rows) < rule.size or not last:
        return last
    oldest = last[0].get("number") or 0
    start = -(-oldest // rule.step) * rule.step  # the next step boundary at or after it
    stepped = [r for r in last if (r.get("number") or 0) >= start]
    return stepped if len(stepped) >= rule.leave_at else last[-rule.leave_at :]


def carried(rows: Sequence[Row], rule: WindowRule) -> tuple[list[Row], int, int]:
    """Return the rows a request carries (lagging unsummarized ones, then the window, in
    thread order), how many of them lag, and how many lagging rows were left out
    because there were too many."""
    window = in_window(rows, rule)
    older = rows[: len(rows) - len(window)]
    lag = [r for r in older if not r.get("summarized")]
    cap = rule.full * LAG_FACTOR
    shown_lag = lag[-cap:] if cap > 0 else []
    return [*shown_lag, *window], len(shown_lag), len(lag) - len(shown_lag)


def due(rows: Sequence[Row], rule: WindowRule, cost: Cost) -> list[Row]:
    """Return the unsummarized rows the summary should fold now (oldest first), or [].

    `rows` are the conversation's newest messages in thread order, the ones just stored
    included. A row is foldable once it is older than the newest `keep` messages (and
    half the working tokens); a fold waits until a batch has gathered (`batch` messages
    or a quarter of the working tokens), unless one of them is about to leave the window
    (the next exchange would push it out) or has left it already.
    """
    keep = newest_within(rows, rule.keep, rule.working // 2, cost)
    foldable = [r for r in rows[: len(rows) - keep] if not r.get("summarized")]
    if not foldable:
        return []
    edge = newest_within(rows, max(0, rule.leave_at - 2), rule.working * 3 // 4, cost)
    leaving = any(not r.get("summarized") for r in rows[: len(rows) - edge])
    gathered = len(foldable) >= rule.batch or sum(map(cost, foldable)) >= rule.working // 4
    return foldable if leaving or gathered else []
