"""The memory bench's report: one column per variant (see bench/memory_load.py)."""

from __future__ import annotations

from typing import Any

from bench.report import fmt

ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("turns (failed)", ("turns",)),
    ("wall time of the turns, s", ("turns_seconds",)),
    ("reply latency median, ms", ("reply_ms", "median")),
    ("reply latency p95, ms", ("reply_ms", "p95")),
    ("replies slower than GIVE_WAY_AFTER", ("replies_after_give_way",)),
    ("chat requests", ("chat_requests",)),
    ("MISSING (request, message) pairs", ("missing", "pairs")),
    ("MISSING distinct messages", ("missing", "messages")),
    ("memory calls received by the server", ("memory", "received")),
    ("  answered", ("memory", "answered")),
    ("  cancelled (client went away)", ("memory", "cancelled")),
    ("  re-sent (a message read again)", ("memory", "resent_calls")),
    ("  summary folds", ("memory", "by_kind", "summary")),
    ("  summary shortenings", ("memory", "by_kind", "shorten")),
    ("  fact extractions", ("memory", "by_kind", "facts")),
    ("prefix share, mean %", ("prompt", "prefix_share_mean")),
    ("prefix share, median %", ("prompt", "prefix_share_median")),
    ("tokens per chat request, mean", ("prompt", "tokens_mean")),
    ("history messages per request, max", ("prompt", "history_max")),
    ("requests whose summary changed", ("prompt", "summary_changed")),
    ("requests whose oldest user message changed", ("prompt", "start_moved")),
)


LEGEND = (
    "MISSING: per chat request, the user messages sent so far (its own included) in neither",
    "  the request nor the summary it carries (what each summary stands for: the Ledger).",
    "cancelled: memory calls whose server handler was cancelled because the client's",
    "  connection went away before the answer (aiohttp's handler cancellation).",
    "re-sent: memory calls that read a user message an earlier call of the same kind (summary",
    "  fold, fact extraction) had read already.",
    "prefix share: of a chat request's message tokens, the share repeating the previous chat",
    "  request's from its first byte (tool schemas left out); requests 2..N.",
)


def _cell(figures: dict[str, Any], path: tuple[str, ...]) -> str:
    value: Any = figures
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if path == ("turns",):
        return f"{value} ({len(figures['failed_turns'])})"
    if path[-1].startswith("prefix_share") and value is not None:
        return f"{100 * value:.1f}"
    return fmt(0 if value is None and path[1:2] == ("by_kind",) else value)


def render(result: dict[str, Any]) -> str:
    """Return the report: a header and one column per variant."""
    meta, figures = result["meta"], result["figures"]
    cfg = meta["config"]
    lines = [
        f"tgagent memory bench ({meta['mode']}), {meta['at']}, {meta['seconds']} s",
        f"database: {meta['database']}, PostgreSQL {meta['postgres']}; {meta['cpus']} CPUs; "
        f"token counter: {meta['counter']}",
        f"one user, {cfg['turns']} turns, the next message {cfg['think']} s after each reply; "
        f"memory model answers in {cfg['memory_seconds']} s; MAX_CONTEXT="
        f"{meta['max_context']}, SUMMARY_TRIGGER={meta['summary_trigger']}, FACTS_EVERY="
        f"{meta['facts_every']}, context {meta['context_limit']:,} tokens, GIVE_WAY_AFTER="
        f"{meta['give_way_after']} s",
        "",
    ]
    head = ["", *figures]
    rows = [head] + [[label, *(_cell(f, path) for f in figures.values())] for label, path in ROWS]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    lines += ["", *LEGEND]
    for name, f in figures.items():
        if f["missing"]["pairs"]:
            lines.append(f"\n{name}: missing at turns {f['missing']['at']}")
        if f["memory"]["resent_calls"]:
            lines.append(f"\n{name}: re-sent messages (turns) {f['memory']['resent_turns']}")
        for what, count in f["warnings"].items():
            lines.append(f"{name}: logged {count} x {what}")
    return "\n".join(lines)


def broken(result: dict[str, Any]) -> bool:
    """Tell whether a turn failed or a message was missing from a request."""
    return any(f["failed_turns"] or f["missing"]["pairs"] for f in result["figures"].values())
