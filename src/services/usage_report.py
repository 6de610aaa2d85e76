"""What /usage, /usage all and `tgagent usage` show: tokens and estimated cost by period."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from src.services.budget import Totals, day_start, month_start
from src.services.texts import t
from src.services.usage import Usage
from src.storage.mcp_calls_repo import McpCallRepository

TOP_USERS = 10


@dataclass
class OwnerUsage:
    """One owner's totals: their last turn, today and this month (in their zone)."""

    last_turn: Totals
    today: Totals
    month: Totals


@dataclass
class Spender:
    """One owner among the top spenders of a period."""

    owner_id: int
    name: str
    totals: Totals


def display_name(row: dict[str, Any]) -> str:
    """Return how an owner is shown: @username, else the name (a group's title), else id."""
    if row.get("username"):
        return f"@{row['username']}"
    return str(row.get("first_name") or row["owner_id"])


class UsageReports:
    """Read usage sums for people (bot commands) and operators (the CLI)."""

    def __init__(self, usage: Usage) -> None:
        self.usage = usage
        self.settings = usage.budget.settings

    async def owner(self, owner_id: int, zone: ZoneInfo | None = None) -> OwnerUsage:
        """Return the owner's usage: last turn, today, this month (days of `zone`, the
        owner's own; None: TIMEZONE)."""
        repo, settings, now = self.usage.repo, self.settings, self.usage.budget.clock()
        month = await repo.owner_sums(owner_id, month_start(now, settings, zone))
        today = await repo.owner_sums(owner_id, day_start(now, settings, zone))
        last = await repo.last_turn(owner_id)
        return OwnerUsage(
            Totals.of(last, settings), Totals.of(today, settings), Totals.of(month, settings)
        )

    async def top(self, since: datetime, limit: int = TOP_USERS) -> list[Spender]:
        """Return the owners who spent most tokens since `since`, most first."""
        by_owner: dict[int, list[dict[str, Any]]] = defaultdict(list)
        names: dict[int, str] = {}
        for row in await self.usage.repo.top_owners(since, limit):
            by_owner[row["owner_id"]].append(row)
            names[row["owner_id"]] = display_name(row)
        spenders = [
            Spender(owner, names[owner], Totals.of(rows, self.settings))
            for owner, rows in by_owner.items()
        ]
        return sorted(spenders, key=lambda s: s.totals.tokens, reverse=True)

    async def top_periods(self) -> dict[str, list[Spender]]:
        """Return the top spenders of today and of this month (TIMEZONE)."""
        now = self.usage.budget.clock()
        return {
            "today": await self.top(day_start(now, self.settings)),
            "month": await self.top(month_start(now, self.settings)),
        }

    async def operator(self, days: int) -> dict[str, Any]:
        """Return the last `days` days (today counted as one) by user and by purpose,
        with totals and cost: what `tgagent usage --json` prints."""
        now = self.usage.budget.clock()
        since = day_start(now, self.settings) - timedelta(days=max(1, days) - 1)
        rows = await self.usage.repo.breakdown(since)
        users: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        purposes: dict[str, list[dict[str, Any]]] = defaultdict(list)
        names: dict[Any, str] = {}
        for row in rows:
            users[row["owner_id"]].append(row)
            purposes[row["purpose"]].append(row)
            names[row["owner_id"]] = display_name(row) if row["owner_id"] is not None else "-"
        user_list = [
            {"owner_id": owner, "name": names[owner], **Totals.of(r, self.settings).as_json()}
            for owner, r in users.items()
        ]
        user_list.sort(key=lambda u: u["input_tokens"] + u["output_tokens"], reverse=True)
        tools = await McpCallRepository(self.usage.repo.pool).sums(since)
        return {
            "since": since.isoformat(),
            "timezone": self.settings.timezone,
            "total": Totals.of(rows, self.settings).as_json(),
            "users": user_list,
            "purposes": {
                purpose: Totals.of(r, self.settings).as_json()
                for purpose, r in sorted(purposes.items())
            },
            "mcp_tools": mcp_tools(tools),
        }


def mcp_tools(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the MCP calls per tool (`NAME_TOOL`): how many, how many ended how, and
    their average milliseconds (rows: per server, tool and outcome)."""
    tools: dict[str, dict[str, Any]] = {}
    for row in rows:
        name = f"{row['server']}_{row['tool']}"
        tool = tools.setdefault(name, {"tool": name, "calls": 0, "outcomes": {}, "ms": 0.0})
        tool["calls"] += row["calls"]
        tool["outcomes"][row["outcome"]] = row["calls"]
        tool["ms"] += float(row["avg_ms"] or 0) * row["calls"]
    for tool in tools.values():
        tool["avg_ms"] = round(tool.pop("ms") / tool["calls"], 1)
    return list(tools.values())


def _cost(totals: Totals, lang: str | None) -> str:
    """Return the cost part of a line: " ≈ $0.0123", or that a model has no price."""
    if totals.unpriced and not totals.cost:
        return t("usage_no_price", lang)
    return f" ≈ ${totals.cost:.4f}"


def usage_line(label_key: str, totals: Totals, lang: str | None) -> str:
    """Return one line of /usage: a period's tokens and cost."""
    label = t(label_key, lang)
    if not totals.calls:
        return t("usage_nothing", lang, label=label)
    return t(
        "usage_line",
        lang,
        label=label,
        tokens=totals.tokens,
        input=totals.input_tokens,
        cached=totals.cached_tokens,
        output=totals.output_tokens,
        cost=_cost(totals, lang),
    )


def render_owner(
    usage: OwnerUsage,
    lang: str | None,
    daily: int,
    monthly: int,
    daily_usd: float = 0.0,
    monthly_usd: float = 0.0,
) -> str:
    """Return /usage's text: the last turn, today, this month, and the budgets if set."""
    lines = [
        t("usage_title", lang),
        usage_line("usage_last_turn", usage.last_turn, lang),
        usage_line("usage_today", usage.today, lang),
        usage_line("usage_month", usage.month, lang),
    ]
    if daily or monthly:
        none = t("usage_unlimited", lang)
        lines.append(t("usage_limits", lang, day=daily or none, month=monthly or none))
    if daily_usd or monthly_usd:
        none = t("usage_unlimited", lang)
        day, month = (f"${limit:g}" if limit else none for limit in (daily_usd, monthly_usd))
        lines.append(t("usage_limits_usd", lang, day=day, month=month))
    return "\n".join(lines)


def render_top(periods: dict[str, list[Spender]], lang: str | None) -> str:
    """Return /usage all's text: the top spenders of today and of this month."""
    lines: list[str] = []
    for period, spenders in periods.items():
        lines.append(t(f"usage_top_{period}", lang))
        if not spenders:
            lines.append(t("usage_top_none", lang))
        for n, spender in enumerate(spenders, start=1):
            cost = _cost(spender.totals, lang)
            lines.append(f"{n}. {spender.name}: {spender.totals.tokens}{cost}")
    return "\n".join(lines)
