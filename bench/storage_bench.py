"""Time `load_last_messages(limit=30)` on a 100,000-message conversation and show its plan.

The per-turn history read must cost the same whether a conversation holds a thousand
messages or a hundred thousand. This seeds both sizes with COPY into a fresh schema,
times the repository call, and prints the EXPLAIN (ANALYZE) plan of its SQL.

    python -m bench storage [--messages 100000] [--small 1000] [--runs 200]

Uses DATABASE_URL / PG_HOST like the application; without them, a temporary embedded
server (the schema is dropped afterwards either way).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from src.config import load_settings
from src.storage.conversation_repo import LOAD_LAST_MESSAGES, ConversationRepository
from src.storage.migrations import migrate
from src.storage.pg_client import describe_dsn, make_pool

RESULTS = Path(__file__).resolve().parent / "results" / "storage.json"
LIMIT = 30
ROLES = ("user", "assistant", "user", "assistant", "tool", "system")
COPY_MESSAGES = "COPY messages (conversation_id, number, role, content, created_at) FROM STDIN"
SET_NEXT_NUMBER = "UPDATE conversations SET next_message_number = %s WHERE id = %s"


@contextmanager
def database() -> Iterator[tuple[str, str]]:
    """Yield (dsn, label): the configured server, else a temporary embedded one."""
    settings = load_settings()
    dsn = settings.server_dsn()
    if dsn is not None:
        yield dsn, describe_dsn(dsn)
        return
    import pgserver

    with tempfile.TemporaryDirectory(prefix="tgab-", dir="/tmp") as tmp:
        server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="stop")
        try:
            yield str(server.get_uri()), "embedded pgserver (temporary)"
        finally:
            server.cleanup()


def _rows(conversation_id: uuid.UUID, count: int) -> Iterator[tuple[Any, ...]]:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 3
    for n in range(1, count + 1):
        role = ROLES[n % len(ROLES)]
        content = f"[{n}] {filler[: 40 + (n * 37) % 120]}"
        yield conversation_id, n, role, content, start + timedelta(seconds=n)


async def seed(pool: AsyncConnectionPool[Any], user_id: int, count: int) -> uuid.UUID:
    """Create one conversation with `count` messages, in bulk."""
    repo = ConversationRepository(pool)
    conv = await repo.get_or_create_conversation(user_id)
    async with pool.connection() as conn:
        async with conn.cursor() as cur, cur.copy(COPY_MESSAGES) as copy:
            for row in _rows(conv, count):
                await copy.write_row(row)
        await conn.execute(SET_NEXT_NUMBER, (count + 1, conv))
    return conv


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def time_loads(
    pool: AsyncConnectionPool[Any], conv: uuid.UUID, runs: int
) -> dict[str, float]:
    """Time `load_last_messages(limit=30)` `runs` times after a short warm-up."""
    repo = ConversationRepository(pool)
    for _ in range(10):
        await repo.load_last_messages(conv, limit=LIMIT)
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        rows = await repo.load_last_messages(conv, limit=LIMIT)
        samples.append((time.perf_counter() - started) * 1000)
        assert len(rows) == LIMIT
    return {
        "median_ms": round(statistics.median(samples), 3),
        "p95_ms": round(_percentile(samples, 0.95), 3),
        "min_ms": round(min(samples), 3),
        "max_ms": round(max(samples), 3),
    }


def _walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _walk(child)


async def explain(pool: AsyncConnectionPool[Any], conv: uuid.UUID) -> dict[str, Any]:
    """Return the plan of the history query: text, indexes used, rows sorted at most."""
    async with pool.connection() as conn:
        cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + LOAD_LAST_MESSAGES, (conv, LIMIT))
        text = "\n".join(str(next(iter(r.values()))) for r in await cur.fetchall())
        cur = await conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + LOAD_LAST_MESSAGES, (conv, LIMIT)
        )
        row = await cur.fetchone()
    assert row is not None
    plan = next(iter(row.values()))[0]["Plan"]
    nodes = list(_walk(plan))
    sorted_rows = [int(n.get("Actual Rows", 0)) for n in nodes if n["Node Type"] == "Sort"]
    return {
        "text": text,
        "indexes": sorted({n["Index Name"] for n in nodes if "Index Name" in n}),
        "largest_sort_rows": max(sorted_rows, default=0),
        "seq_scan": any(n["Node Type"] == "Seq Scan" for n in nodes),
    }


async def run(messages: int, small: int, runs: int) -> dict[str, Any]:
    """Seed both conversations, time the loads and explain the query."""
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with database() as (base_dsn, label):
        async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as admin:
            version = (await (await admin.execute("SHOW server_version")).fetchone() or [""])[0]
            await admin.execute(f'CREATE SCHEMA "{schema}"')
        dsn = psycopg.conninfo.make_conninfo(base_dsn, options=f"-c search_path={schema}")
        pool = make_pool(dsn, 1, 2)
        try:
            await pool.open()
            await pool.wait(timeout=30)
            await migrate(pool)
            started = time.perf_counter()
            big = await seed(pool, 1, messages)
            little = await seed(pool, 2, small)
            async with pool.connection() as conn:
                await conn.execute("ANALYZE messages")
            seed_s = time.perf_counter() - started
            timings = {
                str(messages): await time_loads(pool, big, runs),
                str(small): await time_loads(pool, little, runs),
            }
            plan = await explain(pool, big)
        finally:
            await pool.close()
            async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as admin:
                await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    result = {
        "benchmark": "ConversationRepository.load_last_messages(limit=30)",
        "database": label,
        "postgres": version,
        "runs": runs,
        "seed_seconds": round(seed_s, 2),
        "timings": timings,
        "plan": plan,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    return result


def report(result: dict[str, Any]) -> None:
    """Print the results as a small table and the plan."""
    print(f"{result['benchmark']}, {result['runs']} runs each")
    print(f"database: {result['database']} (PostgreSQL {result['postgres']})")
    print(f"seeded in {result['seed_seconds']} s with COPY\n")
    print(f"{'messages in conversation':>26} | {'median ms':>9} | {'p95 ms':>8} | {'max ms':>8}")
    for size, t in result["timings"].items():
        print(
            f"{int(size):>26,} | {t['median_ms']:>9.3f} | {t['p95_ms']:>8.3f} | {t['max_ms']:>8.3f}"
        )
    plan = result["plan"]
    print(f"\nplan on the largest conversation (indexes: {', '.join(plan['indexes']) or 'none'}):")
    print(plan["text"])
    if plan["seq_scan"] or plan["largest_sort_rows"] > LIMIT:
        print(f"\nWARNING: the plan sorts {plan['largest_sort_rows']} rows or scans the table")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the storage benchmark from the command line."""
    parser = argparse.ArgumentParser(prog="python -m bench storage", description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.messages, args.small, args.runs))
    report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten to {args.out}")
    plan = result["plan"]
    return 1 if plan["seq_scan"] or plan["largest_sort_rows"] > LIMIT else 0


if __name__ == "__main__":
    raise SystemExit(main())
