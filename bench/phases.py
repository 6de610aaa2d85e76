"""The measurements of the turn bench; each phase runs one subject in a fresh schema."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from bench.harness import (
    DbCounter,
    checkpoint_bytes,
    fresh_schema,
    open_bench_pool,
    settled_stats,
    stats_delta,
    summary,
)
from bench.model_server import ModelServerProcess
from bench.subjects import Subject
from src.config import Settings
from src.graph.timestamps import stamp
from src.graph.tokens import PER_MESSAGE_OVERHEAD, TokenCounter

USER_TEXTS = (
    "Привет! Помоги составить план на неделю: работа, спортзал три раза и английский.",
    "А если во вторник у меня допоздна встреча, что сдвинуть?",
    "Напомни, что мы решили про утренние тренировки?",
    "Can you suggest a quick dinner recipe with chicken and rice, under 30 minutes?",
    "Хорошо. А сколько это примерно стоит, если покупать всё в обычном супермаркете?",
    "Слушай, а как вежливо отказать коллеге, который просит помочь ему в пятницу вечером?",
    "Что почитать про тайм-менеджмент, чтобы коротко и без воды?",
    "Ok, and how do I say 'I will be late for the meeting' politely in a message to my boss?",
)

Opener = Callable[[Settings, AsyncConnectionPool[Any]], Awaitable[Subject]]


@dataclass
class Env:
    """What every phase shares: the database server, the model server, settings."""

    base_dsn: str
    settings: Settings
    server: ModelServerProcess
    counter: TokenCounter
    pool_min: int
    pool_max: int


@dataclass
class Sample:
    """One measured turn."""

    ok: bool
    reply: str
    wall_ms: float
    model_ms: float
    overhead_ms: float
    cpu_ms: float
    loop_cpu_ms: float
    """The CPU of the event loop's thread alone: the turn without the threads working
    beside it."""
    background_cpu_ms: float
    """The process's CPU after the reply until the turn's background work was done
    (summary, facts, the embeddings of its messages)."""
    background_ms: float
    embedding_cpu_ms: float
    """The CPU spent embedding the turn's messages (a part of the turn's CPU and of
    the background's, wherever it ran)."""
    tokens_sent: int
    requests: int
    prompts: list[list[str]] = field(default_factory=list)
    """The messages of each of the turn's chat requests, in order."""
    extra: dict[str, Any] = field(default_factory=dict)


def user_text(turn: int) -> str:
    """Return the user's message of turn `turn` (numbered, so no two are equal)."""
    return f"{USER_TEXTS[turn % len(USER_TEXTS)]} ({turn})"


def tokens_of(texts: list[str], counter: TokenCounter) -> int:
    """Count a request's messages the way our context builder does."""
    return sum(counter.count(t) + PER_MESSAGE_OVERHEAD for t in texts)


@asynccontextmanager
async def opened(env: Env, opener: Opener, prefix: str) -> AsyncIterator[tuple[Subject, Any]]:
    """Yield (subject, (pool, schema)) in a fresh schema; drop the schema afterwards."""
    async with fresh_schema(env.base_dsn, prefix) as (dsn, schema):
        pool = await open_bench_pool(dsn, env.pool_min, env.pool_max)
        try:
            subject = await opener(env.settings, pool)
            try:
                yield subject, (pool, schema, dsn)
            finally:
                await subject.close()
        finally:
            await pool.close()


async def measured_turn(env: Env, subject: Subject, conv: int, text: str) -> Sample:
    """Run one turn; subtract the model server's own time from the wall time."""
    cpu, loop_cpu = time.process_time(), time.thread_time()
    embedding_cpu = subject.embedding_cpu()
    started = time.perf_counter()
    ok, reply = await subject.turn(conv, text)
    replied = time.perf_counter()
    cpu_ms = (time.process_time() - cpu) * 1000
    loop_cpu_ms = (time.thread_time() - loop_cpu) * 1000
    after = time.process_time()
    await subject.settle()
    settled = time.perf_counter()
    background_cpu_ms = (time.process_time() - after) * 1000
    log = await env.server.take()
    chat = [e for e in log if e["model"] == env.settings.llm_model]
    other = [e for e in log if e["model"] != env.settings.llm_model]
    model_s = sum(e["seconds"] for e in chat)
    wall_ms = (replied - started) * 1000
    return Sample(
        ok=ok,
        reply=reply,
        wall_ms=wall_ms,
        model_ms=model_s * 1000,
        overhead_ms=wall_ms - model_s * 1000,
        cpu_ms=cpu_ms,
        loop_cpu_ms=loop_cpu_ms,
        background_cpu_ms=background_cpu_ms,
        background_ms=((settled - replied) - sum(e["seconds"] for e in other)) * 1000,
        embedding_cpu_ms=(subject.embedding_cpu() - embedding_cpu) * 1000,
        tokens_sent=tokens_of(chat[0]["messages"], env.counter) if chat else 0,
        requests=len(chat),
        prompts=[list(e["messages"]) for e in chat],
    )


def repeated_prefix(previous: list[str], request: list[str], counter: TokenCounter) -> float:
    """Return the share of `request`'s tokens that repeat `previous` from the start, byte
    for byte: what an endpoint's prompt cache can reuse (the same tools, on both sides,
    are left out of both)."""
    total = tokens_of(request, counter)
    if not total:
        return 0.0
    shared = 0
    for old, new in zip(previous, request, strict=False):
        if old == new:
            shared += counter.count(new) + PER_MESSAGE_OVERHEAD
            continue
        common = 0
        for a, b in zip(old, new, strict=False):
            if a != b:
                break
            common += 1
        shared += counter.count(new[:common])
        break
    return shared / total


def prefix_shares(samples: list[Sample], counter: TokenCounter) -> list[float]:
    """Return, per turn, the mean share of its chat requests' tokens that repeat the
    previous chat request's prefix (the first turn has no previous request: 0)."""
    shares: list[float] = []
    previous: list[str] = []
    for sample in samples:
        turn: list[float] = []
        for request in sample.prompts:
            turn.append(repeated_prefix(previous, request, counter))
            previous = request
        shares.append(sum(turn) / len(turn) if turn else 0.0)
    return shares


def _ms(samples: list[Sample]) -> dict[str, float]:
    return summary([s.overhead_ms for s in samples])


class _Long:
    """One subject's long conversation, played a turn at a time (see `long_conversations`)."""

    def __init__(
        self, env: Env, subject: Subject, pool: Any, turns: int, marks: list[int], window: int
    ) -> None:
        self.env, self.subject, self.pool = env, subject, pool
        self.turns, self.marks, self.window = turns, marks, window
        self.samples: list[Sample] = []
        self.history_tokens = 0
        self.at: dict[str, dict[str, Any]] = {}
        self.bytes_before: dict[int, dict[str, int]] = {}
        self.starts = {max(1, m - window + 1): m for m in marks}

    async def turn(self, k: int) -> None:
        env, samples = self.env, self.samples
        if k in self.starts:
            self.bytes_before[self.starts[k]] = await checkpoint_bytes(self.pool)
        text = user_text(k)
        sample = await measured_turn(env, self.subject, 1, text)
        samples.append(sample)
        stamped = stamp(text, datetime.now(UTC), env.settings)
        self.history_tokens += tokens_of([stamped, sample.reply], env.counter)
        if k in self.marks:
            after = await checkpoint_bytes(self.pool)
            first = max(1, k - self.window + 1)
            n = k - first + 1
            before = self.bytes_before[k]
            shares = prefix_shares(samples[first - 1 : k], env.counter)
            if first == 1:
                shares = shares[1:]  # the first request has nothing to repeat
            self.at[str(k)] = {
                "tokens_sent": sample.tokens_sent,
                "prefix_repeated": round(sum(shares) / len(shares), 3) if shares else None,
                "history_tokens": self.history_tokens,
                "overhead_ms": summary([s.overhead_ms for s in samples[first - 1 : k]]),
                "checkpoint_bytes_per_turn": round((after["rows"] - before["rows"]) / n),
                "checkpoint_disk_bytes_per_turn": round((after["disk"] - before["disk"]) / n),
                "checkpoint_bytes_total": after["rows"],
            }

    def result(self) -> dict[str, Any]:
        samples = self.samples
        return {
            "turns": self.turns,
            "failed": sum(not s.ok for s in samples),
            "overhead_ms": _ms(samples),
            "cpu_ms": summary([s.cpu_ms for s in samples]),
            "loop_cpu_ms": summary([s.loop_cpu_ms for s in samples]),
            "background_cpu_ms": summary([s.background_cpu_ms for s in samples]),
            "embedding_cpu_ms": summary([s.embedding_cpu_ms for s in samples]),
            "wall_ms": summary([s.wall_ms for s in samples]),
            "model_ms": summary([s.model_ms for s in samples]),
            "background_ms": summary([s.background_ms for s in samples]),
            "at_turn": self.at,
            "series": {
                "overhead_ms": [round(s.overhead_ms, 3) for s in samples],
                "tokens_sent": [s.tokens_sent for s in samples],
                "prefix_repeated": [round(x, 3) for x in prefix_shares(samples, self.env.counter)],
            },
        }


async def long_conversations(
    env: Env, openers: dict[str, Opener], turns: int, marks: list[int], window: int = 10
) -> dict[str, dict[str, Any]]:
    """Figures 1, 5, 6: one conversation of `turns` turns per subject, single stream, the
    subjects side by side: turn k of each before turn k + 1 of any, who goes first
    alternating. A slow minute of the machine (other tenants, the CPU's clock) then weighs
    on every subject alike, as it did not when each ran its 300 turns in turn."""
    async with contextlib.AsyncExitStack() as stack:
        runs: dict[str, _Long] = {}
        for name, opener in openers.items():
            subject, (pool, _, _) = await stack.enter_async_context(
                opened(env, opener, f"bench_long_{name}")
            )
            runs[name] = _Long(env, subject, pool, turns, marks, window)
        names = list(runs)
        for k in range(1, turns + 1):
            for name in names if k % 2 else names[::-1]:
                await runs[name].turn(k)
        return {name: run.result() for name, run in runs.items()}


async def db_accounting(env: Env, opener: Opener, warm: int, turns: int) -> dict[str, Any]:
    """Figure 2: round trips and rows written per turn, once the window is full."""
    async with fresh_schema(env.base_dsn, "bench_db") as (dsn, schema):
        pool = await open_bench_pool(dsn, env.pool_min, env.pool_max)
        subject = await opener(env.settings, pool)
        for k in range(1, warm + 1):
            await measured_turn(env, subject, 1, user_text(k))
        await subject.close()
        await pool.close()
        before = await settled_stats(env.base_dsn, schema)
        pool = await open_bench_pool(dsn, env.pool_min, env.pool_max)
        subject = await opener(env.settings, pool)
        counter = DbCounter()
        # What the turns did before their replies were ready (the hot path).
        hot: Counter[str] = Counter()
        with counter.installed():
            for k in range(warm + 1, warm + turns + 1):
                before_turn = counter.counts.copy()
                await subject.turn(1, user_text(k))
                hot.update(counter.counts - before_turn)
                await subject.settle()
                await env.server.take()
        await subject.close()
        stored = await subject.stored(1)
        await pool.close()
        after = await settled_stats(env.base_dsn, schema)
        for_table = stats_delta(after, before)
        rows = {
            t: {k: round(v / turns, 2) for k, v in d.items()} for t, d in sorted(for_table.items())
        }
        total = sum(sum(d.values()) for d in for_table.values())
        return {
            "turns": turns,
            "after_warm_up_turns": warm,
            "stored_messages": stored,
            "per_turn": {k: round(v / turns, 2) for k, v in sorted(counter.counts.items())},
            "before_reply_per_turn": {k: round(v / turns, 2) for k, v in sorted(hot.items())},
            "rows_written_per_turn": round(total / turns, 2),
            "rows_by_table_per_turn": rows,
        }


async def throughput(
    env: Env, opener: Opener, conversations: int, seconds: float, seeded: int
) -> dict[str, Any]:
    """Figure 3: `conversations` users at once, each sending messages one after another.

    Time-boxed: every user starts a new turn until `seconds` have passed, so the phase
    lasts about as long on a slow machine as on a fast one.
    """
    async with opened(env, opener, "bench_load") as (subject, _):
        users = range(1000, 1000 + conversations)
        for conv in users:
            await subject.seed(conv, seeded)
        before = {conv: await subject.stored(conv) for conv in users}
        # Warm-up: one concurrent round grows the pool and fills caches; not timed.
        warm = await asyncio.gather(*(subject.turn(conv, user_text(0)) for conv in users))
        await subject.settle()
        await env.server.take()
        latencies: list[float] = []
        done = {conv: 1 for conv in users}
        failed = sum(not ok for ok, _ in warm)
        cpu, embedding_cpu = time.process_time(), subject.embedding_cpu()
        started = time.perf_counter()
        deadline = started + seconds

        async def user(conv: int) -> None:
            nonlocal failed
            while time.perf_counter() < deadline:
                begun = time.perf_counter()
                ok, _ = await subject.turn(conv, user_text(done[conv]))
                latencies.append((time.perf_counter() - begun) * 1000)
                done[conv] += 1
                failed += not ok

        await asyncio.gather(*(user(conv) for conv in users))
        replied = time.perf_counter()
        await subject.settle()
        settled = time.perf_counter()
        cpu, embedding_cpu = time.process_time() - cpu, subject.embedding_cpu() - embedding_cpu
        log = await env.server.take()
        lost = 0
        for conv in users:
            lost += max(0, 2 * done[conv] - (await subject.stored(conv) - before[conv]))
        total = len(latencies)
        return {
            "conversations": conversations,
            "seconds": seconds,
            "seeded_messages_each": seeded,
            "turns": total,
            "failed_turns": failed,
            "lost_messages": lost,
            "expected_messages": 2 * sum(done.values()),
            "turns_per_s": round(total / (settled - started), 1),
            "replies_per_s": round(total / (replied - started), 1),
            # The process's CPU over the phase, background work included, per turn.
            "cpu_ms_per_turn": round(cpu * 1000 / max(1, total), 2),
            "embedding_cpu_ms_per_turn": round(embedding_cpu * 1000 / max(1, total), 2),
            "latency_ms": summary(latencies),
            "model_requests": len(log),
        }


async def growth(
    env: Env, opener: Opener, sizes: list[int], turns: int
) -> dict[str, dict[str, Any]]:
    """Figure 4: overhead in conversations already holding `sizes` messages, interleaved."""
    async with opened(env, opener, "bench_grow") as (subject, _):
        seed_s: dict[int, float] = {}
        for i, size in enumerate(sizes):
            started = time.perf_counter()
            await subject.seed(2000 + i, size)
            seed_s[size] = time.perf_counter() - started
        samples: dict[int, list[Sample]] = {size: [] for size in sizes}
        for k in range(1, turns + 1):
            for i, size in enumerate(sizes):
                samples[size].append(await measured_turn(env, subject, 2000 + i, user_text(k)))
        return {
            str(size): {
                "overhead_ms": _ms(samples[size][1:]),  # the first turn warms caches
                "failed": sum(not s.ok for s in samples[size]),
                "seed_s": round(seed_s[size], 2),
            }
            for size in sizes
        }


async def timed(label: str, work: Awaitable[Any], log: Callable[[str], None]) -> Any:
    """Await `work`, logging how long it took."""
    started = time.perf_counter()
    result = await work
    log(f"  {label}: {time.perf_counter() - started:.1f} s")
    return result
