"""What the budget check costs: `python -m bench budget [--calls N] [--rows N] [--repeat N]`.

With a budget set, the owner's and sender's budgets are read before every model call of a
turn (src/services/budget.py): one query summing their calls of the month by model, over
their own chats' rows and their group turns' rows. This fills `llm_calls` with `--rows`
calls of 500 other people and `--calls` of one person this month (a third of them in a
group they write in), then times `Budget.resets_at` for the person in private and in the
group. Uses DATABASE_URL / PG_HOST like the application; without them, a temporary
embedded server. Timings are reported here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

from bench.harness import fresh_schema, open_bench_pool, percentile, server
from src.config import Settings
from src.graph.deps import utc_now
from src.services.budget import Budget
from src.storage.migrations import migrate
from src.storage.usage_repo import UsageRepository

PERSON, GROUP = 5, -9
# The person's calls over the last days (a third in GROUP, sent by them), then the others'.
FILL_PERSON = """
INSERT INTO llm_calls (owner_id, sender_id, purpose, model, input_tokens, output_tokens, at)
SELECT CASE WHEN i %% 3 = 0 THEN %(group)s ELSE %(person)s END,
       CASE WHEN i %% 3 = 0 THEN %(person)s END, 'reply', 'gpt-4o-mini', 300, 20,
       now() - make_interval(mins => i)
FROM generate_series(1, %(calls)s) AS i
"""
FILL_OTHERS = """
INSERT INTO llm_calls (owner_id, purpose, model, input_tokens, output_tokens)
SELECT i %% 500 + 1000, 'reply', 'gpt-4o-mini', 300, 20 FROM generate_series(1, %(rows)s) AS i
"""


async def run(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """Return (median, p95) milliseconds of the check, by case."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, user_daily_tokens=10**9, user_monthly_usd=10_000.0
    )
    results: dict[str, tuple[float, float]] = {}
    with server() as (base, _label):
        async with fresh_schema(base, "bench_budget") as (dsn, _schema):
            pool = await open_bench_pool(dsn, 1, 2)
            try:
                await migrate(pool)
                async with pool.connection() as conn:
                    params = {"person": PERSON, "group": GROUP, "calls": args.calls}
                    await conn.execute(FILL_PERSON, params)
                    await conn.execute(FILL_OTHERS, {"rows": args.rows})
                    await conn.execute("VACUUM ANALYZE llm_calls")
                budget = Budget(UsageRepository(pool), settings, utc_now)
                for case, owner in (("private", PERSON), ("group", GROUP)):
                    times = []
                    for _ in range(args.repeat):
                        started = time.perf_counter()
                        await budget.resets_at(owner, PERSON)
                        times.append((time.perf_counter() - started) * 1000)
                    results[case] = (statistics.median(times), percentile(times, 0.95))
            finally:
                await pool.close()
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=3000, help="the person's calls this month")
    parser.add_argument("--rows", type=int, default=100_000, help="other people's calls")
    parser.add_argument("--repeat", type=int, default=200, help="checks per case")


def report(args: argparse.Namespace) -> int:
    """Print one Markdown table row per case."""
    results = asyncio.run(run(args))
    print(
        f"| check (person with {args.calls} calls, {args.rows} other rows) | median ms | p95 ms |"
    )
    print("|---|---:|---:|")
    for case, (median, p95) in results.items():
        print(f"| {case} | {median:.2f} | {p95:.2f} |")
    return 0


async def _command(args: argparse.Namespace, settings: Settings) -> int:
    results = await run(args)
    for case, (median, p95) in results.items():
        print(f"{case}: median {median:.2f} ms, p95 {p95:.2f} ms")
    return 0


def register(sub: Any) -> None:
    """Add `tgagent bench budget [options]` to `tgagent bench`'s subcommands."""
    parser = sub.add_parser("budget", help="what the budget check costs", description=__doc__)
    add_arguments(parser)
    parser.set_defaults(handler=_command)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench budget", description=__doc__)
    add_arguments(parser)
    return report(parser.parse_args(argv))
