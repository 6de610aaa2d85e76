"""`tgagent usage [--days N] [--json]`: tokens and estimated cost by user and by purpose,
and the MCP tools' calls."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from src.config import Settings

COLUMNS = ("calls", "input_tokens", "cached_tokens", "output_tokens")
HEADERS = ("calls", "input", "cached", "output", "cost")


def _cost(totals: dict[str, Any]) -> str:
    """Return a cost cell: dollars, with `+?` when some model has no price."""
    unpriced = "+?" if totals["unpriced_models"] else ""
    return f"${totals['cost_usd']:.4f}{unpriced}"


def _row(name: str, totals: dict[str, Any], width: int) -> str:
    cells = [f"{totals[c]:>10}" for c in COLUMNS] + [f"{_cost(totals):>12}"]
    return f"  {name:<{width}}" + "".join(cells)


def render(report: dict[str, Any]) -> str:
    """Return the report as the table the terminal shows."""
    names = [
        f"{u['name']} ({u['owner_id']})" if u["owner_id"] else "(no owner)" for u in report["users"]
    ]
    width = max([len(n) for n in names] + [len(p) for p in report["purposes"]] + [12])
    header = f"  {'':<{width}}" + "".join(f"{h:>10}" for h in HEADERS[:-1]) + f"{'cost':>12}"
    lines = [f"usage since {report['since'][:16].replace('T', ' ')} ({report['timezone']})"]
    lines += ["", "by user:", header]
    lines += [_row(n, u, width) for n, u in zip(names, report["users"], strict=True)]
    lines += ["", "by purpose:", header]
    lines += [_row(p, totals, width) for p, totals in report["purposes"].items()]
    lines += ["", _row("total", report["total"], width)]
    unpriced = report["total"]["unpriced_models"]
    if unpriced:
        lines.append(f"no price in MODEL_PRICES for: {', '.join(unpriced)} (left out of cost)")
    if report.get("mcp_tools"):
        lines += ["", "MCP tool calls:"]
        for tool in report["mcp_tools"]:
            ended = ", ".join(f"{n} {outcome}" for outcome, n in sorted(tool["outcomes"].items()))
            average = f"{tool['avg_ms']} ms on average"
            lines.append(f"  {tool['tool']}: {tool['calls']} ({ended}), {average}")
    return "\n".join(lines)


async def _usage(args: argparse.Namespace, settings: Settings) -> int:
    from src.graph.deps import utc_now
    from src.graph.tokens import ApproxCounter
    from src.services.usage import Usage
    from src.services.usage_report import UsageReports
    from src.storage.migrations import migrate
    from src.storage.pg_client import open_pool_from_settings

    pool = await open_pool_from_settings(settings)
    try:
        await migrate(pool)
        usage = Usage.over(pool, settings, ApproxCounter(), utc_now)
        report = await UsageReports(usage).operator(args.days)
    finally:
        await pool.close()
    text = json.dumps(report, ensure_ascii=False, indent=2) if args.json else render(report)
    print(text)  # noqa: T201
    return 0


def register(sub: Any, db_sub: Any) -> None:
    """Add `tgagent usage`."""
    del db_sub
    parser = sub.add_parser(
        "usage", help="tokens and estimated cost of model calls, by user and by purpose"
    )
    parser.add_argument(
        "--days", type=int, default=30, help="the last N days, today included (default 30)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=_usage, quiet_logs=True)
