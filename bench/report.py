"""Print the turn bench's figures as tables, and judge them against the issue's targets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

OURS, BASE = "tgagent", "langgraph-react"


def advantage(ours: Any, base: Any, higher_is_better: bool = False) -> str:
    """Return how many times better tgagent is than the baseline, e.g. `3.4x`."""
    numbers = isinstance(ours, int | float) and isinstance(base, int | float)
    if not numbers or ours <= 0 or base <= 0:
        return "-"
    return f"{(ours / base if higher_is_better else base / ours):.1f}x"


def fmt(value: Any) -> str:
    """Format a figure for a table cell."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def get(data: Any, *path: str) -> Any:
    """Return `data[path[0]][path[1]]...`, or None where a key is missing."""
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


class Table:
    """A plain-text table: metric, tgagent, baseline, how many times better, target."""

    HEAD = ("", OURS, BASE, "tgagent better by", "target")

    def __init__(self, title: str) -> None:
        self.title = title
        self.rows: list[tuple[str, ...]] = []

    def add(
        self,
        metric: str,
        ours: Any,
        base: Any,
        *,
        higher_is_better: bool = False,
        target: str = "",
        ratio: str | None = None,
    ) -> None:
        shown = advantage(ours, base, higher_is_better) if ratio is None else ratio
        self.rows.append((metric, fmt(ours), fmt(base), shown, target))

    def render(self) -> str:
        rows = [self.HEAD, *self.rows]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self.HEAD))]
        lines = [self.title]
        for row in rows:
            cells = [row[0].ljust(widths[0])]
            cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
            lines.append("  " + "  ".join(cells).rstrip())
        return "\n".join(lines)


def _marks(result: dict[str, Any]) -> list[str]:
    return list(get(result, "figures", "ours", "long", "at_turn") or {})


def overhead_table(ours: dict[str, Any], base: dict[str, Any]) -> Table:
    """Figure 1: per-turn overhead, single stream."""
    lo, lb = ours.get("long", {}), base.get("long", {})
    turns = lo.get("turns")
    t = Table(
        f"1) Per-turn overhead, single stream, ms: wall time of a turn minus the model "
        f"server's own time ({turns}-turn conversation)"
    )
    for q in ("median", "p95", "p99"):
        t.add(
            f"{q}, all turns",
            get(lo, "overhead_ms", q),
            get(lb, "overhead_ms", q),
            target="<= 8 ms" if q == "p95" else "",
        )
    for mark in lo.get("at_turn", {}):
        t.add(
            f"median at turn {mark} (its last 10 turns)",
            get(lo, "at_turn", mark, "overhead_ms", "median"),
            get(lb, "at_turn", mark, "overhead_ms", "median"),
            target=">= 3x" if mark == str(turns) else "",
        )
    t.add(
        "CPU of the bench process per turn, median",
        get(lo, "cpu_ms", "median"),
        get(lb, "cpu_ms", "median"),
        target="<= 15 ms",
    )
    t.add(
        "  of which the event loop's thread, median",
        get(lo, "loop_cpu_ms", "median"),
        get(lb, "loop_cpu_ms", "median"),
    )
    t.add(
        "work after the reply (summary, facts, embeddings), median",
        get(lo, "background_ms", "median"),
        get(lb, "background_ms", "median"),
        ratio="-",
    )
    t.add(
        "  its CPU, median",
        get(lo, "background_cpu_ms", "median"),
        get(lb, "background_cpu_ms", "median"),
        ratio="-",
    )
    t.add(
        "embedding the turn's messages, CPU, median",
        get(lo, "embedding_cpu_ms", "median"),
        get(lb, "embedding_cpu_ms", "median"),
        ratio="-",
        target="<= 30 ms",
    )
    return t


DB_ROWS = (
    ("round_trips", "round trips"),
    ("saver_round_trips", "  of which checkpointer"),
    ("commits", "commits waiting for a WAL flush"),
    ("saver_commits", "  of which checkpointer"),
    ("async_commits", "commits not waiting (synchronous_commit off)"),
    ("statements", "statements"),
    ("checkouts", "pool checkouts"),
    ("saver_calls", "checkpointer calls"),
)


# Before the reply is ready (the hot path); the rest is the work after it (summary, facts).
HOT_ROWS = (
    ("round_trips", "before the reply: round trips", "<= 15"),
    ("commits", "before the reply: commits waiting for a WAL flush", "<= 4"),
    ("statements", "before the reply: statements", ""),
)


def db_table(ours: dict[str, Any], base: dict[str, Any]) -> Table:
    """Figure 2: database work per turn."""
    do, db = ours.get("db", {}), base.get("db", {})
    t = Table(
        f"2) Database work per turn, window full ({do.get('turns', '?')} turns after "
        f"{do.get('after_warm_up_turns', '?')})"
    )
    for key, label in DB_ROWS:
        t.add(label, get(do, "per_turn", key), get(db, "per_turn", key))
    for key, label, target in HOT_ROWS:
        ours_hot = get(do, "before_reply_per_turn", key)
        base_hot = get(db, "before_reply_per_turn", key)
        t.add(label, ours_hot or 0.0, base_hot or 0.0, target=target)
    t.add("rows written", do.get("rows_written_per_turn"), db.get("rows_written_per_turn"))
    names = set(do.get("rows_by_table_per_turn", {})) | set(db.get("rows_by_table_per_turn", {}))

    def rows(data: dict[str, Any], name: str) -> str:
        v = get(data, "rows_by_table_per_turn", name)
        return "-" if v is None else "/".join(fmt(v.get(k, 0)) for k in ("ins", "upd", "del"))

    for name in sorted(names):
        t.add(f"  {name} (ins/upd/del)", rows(do, name), rows(db, name), ratio="")
    return t


def load_table(ours: dict[str, Any], base: dict[str, Any]) -> Table:
    """Figure 3: throughput with concurrent conversations, and lost messages."""
    to, tb = ours.get("load", {}), base.get("load", {})
    t = Table(
        f"3) Throughput: {to.get('conversations', '?')} conversations at once, each sending "
        f"one message after another for {to.get('seconds', '?')} s "
        f"({to.get('seeded_messages_each', '?')} messages stored in each before)"
    )
    t.add(
        "turns/s (background work included)",
        to.get("turns_per_s"),
        tb.get("turns_per_s"),
        higher_is_better=True,
        target=">= 200",
    )
    t.add("replies/s", to.get("replies_per_s"), tb.get("replies_per_s"), higher_is_better=True)
    t.add(
        "CPU per turn, background work included, ms",
        to.get("cpu_ms_per_turn"),
        tb.get("cpu_ms_per_turn"),
    )
    t.add(
        "  of which embedding its messages, ms",
        to.get("embedding_cpu_ms_per_turn"),
        tb.get("embedding_cpu_ms_per_turn"),
        ratio="-",
        target="<= 30",
    )
    t.add("turns", to.get("turns"), tb.get("turns"), ratio="")
    for q in ("median", "p95"):
        t.add(
            f"reply latency under load, {q}, ms",
            get(to, "latency_ms", q),
            get(tb, "latency_ms", q),
        )
    t.add(
        "lost messages (counted in the database)",
        to.get("lost_messages"),
        tb.get("lost_messages"),
        target="0",
        ratio="-",
    )
    t.add("failed turns", to.get("failed_turns"), tb.get("failed_turns"), ratio="-")
    return t


def growth_ratio(data: dict[str, Any]) -> float | None:
    """Return median overhead at the largest stored size over that at the smallest."""
    sizes = sorted(int(s) for s in data)
    if len(sizes) < 2:
        return None
    small = get(data, str(sizes[0]), "overhead_ms", "median")
    large = get(data, str(sizes[-1]), "overhead_ms", "median")
    if not small or large is None:
        return None
    return round(large / small, 2)


def growth_table(ours: dict[str, Any], base: dict[str, Any]) -> Table:
    """Figure 4: overhead against the number of stored messages."""
    go, gb = ours.get("growth", {}), base.get("growth", {})
    t = Table("4) Growth: per-turn overhead, ms, with N messages already in the conversation")
    for size in sorted({int(s) for s in [*go, *gb]}):
        for q in ("median", "p95"):
            t.add(
                f"{size:,} messages, {q}",
                get(go, str(size), "overhead_ms", q),
                get(gb, str(size), "overhead_ms", q),
            )
    so, sb = sorted(int(s) for s in go), sorted(int(s) for s in gb)
    if so and sb:
        t.add(
            f"largest/smallest median ({so[-1]:,}/{so[0]:,}; baseline {sb[-1]:,}/{sb[0]:,})",
            growth_ratio(go),
            growth_ratio(gb),
            target="<= 1.2x",
            ratio="-",
        )
    return t


def _percent(share: Any) -> float | None:
    return None if share is None else round(100 * share, 1)


def tokens_table(result: dict[str, Any]) -> Table:
    """Figure 5: tokens sent per turn against the full history."""
    lo = get(result, "figures", "ours", "long") or {}
    lb = get(result, "figures", "baseline", "long") or {}
    t = Table(
        "5) Tokens sent to the model per turn, against the size of the full history; the "
        "share of a request's tokens repeating the previous request's from the start (what a "
        "prompt cache reuses; mean of the last 10 turns)"
    )
    for mark in _marks(result):
        t.add(
            f"turn {mark}: sent",
            get(lo, "at_turn", mark, "tokens_sent"),
            get(lb, "at_turn", mark, "tokens_sent"),
        )
        t.add(
            f"turn {mark}: repeating the previous request's prefix, %",
            _percent(get(lo, "at_turn", mark, "prefix_repeated")),
            _percent(get(lb, "at_turn", mark, "prefix_repeated")),
            higher_is_better=True,
            target=">= 50%" if int(mark) >= 50 else "",
        )
        t.add(
            f"turn {mark}: full history",
            get(lo, "at_turn", mark, "history_tokens"),
            get(lb, "at_turn", mark, "history_tokens"),
            ratio="",
        )
    return t


def checkpoint_table(result: dict[str, Any]) -> Table:
    """Figure 6: checkpoint bytes added per turn."""
    lo = get(result, "figures", "ours", "long") or {}
    lb = get(result, "figures", "baseline", "long") or {}
    t = Table("6) Checkpoint bytes added per turn (stored row sizes, mean of the last 10 turns)")
    for mark in _marks(result):
        t.add(
            f"turn {mark}",
            get(lo, "at_turn", mark, "checkpoint_bytes_per_turn"),
            get(lb, "at_turn", mark, "checkpoint_bytes_per_turn"),
        )
    last = str(lo.get("turns"))
    t.add(
        f"checkpoint tables after turn {last}",
        get(lo, "at_turn", last, "checkpoint_bytes_total"),
        get(lb, "at_turn", last, "checkpoint_bytes_total"),
    )
    return t


def tables(result: dict[str, Any]) -> list[Table]:
    """Build one table per figure from the bench's JSON result."""
    ours, base = result["figures"]["ours"], result["figures"]["baseline"]
    return [
        overhead_table(ours, base),
        db_table(ours, base),
        load_table(ours, base),
        growth_table(ours, base),
        tokens_table(result),
        checkpoint_table(result),
    ]


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Judge the issue's targets (reported, never asserted)."""
    ours, base = result["figures"]["ours"], result["figures"]["baseline"]
    out: list[dict[str, Any]] = []

    def judge(name: str, value: Any, ok: Callable[[Any], bool]) -> None:
        out.append({"target": name, "value": value, "met": value is not None and ok(value)})

    judge(
        "overhead p95 <= 8 ms single-stream",
        get(ours, "long", "overhead_ms", "p95"),
        lambda v: v <= 8,
    )
    turns = str(get(ours, "long", "turns"))
    o = get(ours, "long", "at_turn", turns, "overhead_ms", "median")
    b = get(base, "long", "at_turn", turns, "overhead_ms", "median")
    judge(
        f">= 3x lower overhead than the baseline at turn {turns}",
        round(b / o, 2) if o and b else None,
        lambda v: v >= 3,
    )
    sizes = sorted(int(s) for s in ours.get("growth", {}))
    if len(sizes) >= 2:
        judge(
            f"{sizes[-1]:,} stored messages within 1.2x of {sizes[0]:,}",
            growth_ratio(ours["growth"]),
            lambda v: v <= 1.2,
        )
    load = ours.get("load", {})
    judge(
        f">= 200 turns/s with {load.get('conversations')} concurrent conversations",
        load.get("turns_per_s"),
        lambda v: v >= 200,
    )
    judge("no lost message under load", load.get("lost_messages"), lambda v: v == 0)
    first = min((int(m) for m in get(ours, "long", "at_turn") or {}), default=None)
    if first is not None:
        o = get(ours, "long", "at_turn", str(first), "overhead_ms", "median")
        b = get(base, "long", "at_turn", str(first), "overhead_ms", "median")
        judge(
            f">= 1.0x the baseline's overhead at turn {first}",
            round(b / o, 2) if o and b else None,
            lambda v: v >= 1.0,
        )
    hot = get(ours, "db", "before_reply_per_turn") or {}
    judge("<= 15 round trips before the reply", hot.get("round_trips"), lambda v: v <= 15)
    judge(
        "<= 4 commits waiting for a WAL flush before the reply",
        hot.get("commits", 0.0) if hot else None,
        lambda v: v <= 4,
    )
    judge("CPU per turn <= 15 ms, median", get(ours, "long", "cpu_ms", "median"), lambda v: v <= 15)
    judge(
        f"checkpoint bytes per turn <= 15 KB at turn {turns}",
        get(ours, "long", "at_turn", turns, "checkpoint_bytes_per_turn"),
        lambda v: v <= 15_000,
    )
    repeated = [
        v["prefix_repeated"]
        for k, v in (get(ours, "long", "at_turn") or {}).items()
        if int(k) >= 50 and v.get("prefix_repeated") is not None
    ]
    judge(
        "prompt prefix repeated >= 50% at turns 50+ (the lowest mark)",
        round(100 * min(repeated), 1) if repeated else None,
        lambda v: v >= 50,
    )
    at = get(ours, "long", "at_turn") or {}
    sent = [v["tokens_sent"] for k, v in at.items() if int(k) >= 50]
    judge(
        "tokens per turn flat once the window is full (max/min of turns 50+)",
        round(max(sent) / min(sent), 2) if len(sent) >= 2 and min(sent) > 0 else None,
        lambda v: v <= 1.1,
    )
    return out


def render(result: dict[str, Any]) -> str:
    """Return the whole report: header, six tables, targets."""
    meta = result["meta"]
    lines = [
        f"tgagent bench ({meta['mode']}), {meta['at']}, {meta['seconds']} s",
        f"database: {meta['database']}, PostgreSQL {meta['postgres']}; {meta['cpus']} CPUs",
        f"model server: local, instant, {meta['reply_chars']}-character reply; "
        f"token counter: {meta['counter']}",
        f"context: last {meta['max_context']} messages, input budget "
        f"{meta['input_budget']:,} tokens (the baseline trims to the same budget)",
        "",
    ]
    for table in tables(result):
        lines += [table.render(), ""]
    lines.append("Targets (reported, never asserted):")
    for t in result["targets"]:
        verdict = "n/a" if t["value"] is None else ("met" if t["met"] else "MISSED")
        lines.append(f"  [{verdict}] {t['target']}: {fmt(t['value'])}")
    return "\n".join(lines)
