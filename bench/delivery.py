"""Turns/s through the inbox with 1, 2 and 4 working processes; the queue's cost per turn.

Drives the real bot against the fake Bot API (tests/fakes/bot_api_server.py, in this
process), the bench model server (tests' FakeOpenAI in its own process, answering at once
or after `--delay` seconds) and real PostgreSQL, each configuration in a fresh schema
dropped afterwards:

- throughput: `tgagent bot` alone (it receives and works), then with 1 and with 3
  `tgagent worker` processes beside it (1, 2, 4 working processes). N chats each send M
  messages, all pushed at once; turns/s is N*M over the time from the first push to the
  last reply Telegram (the fake) accepted.
- the queue's cost: the one-process configuration again, in this process (build_application
  + serve, as the e2e tests run it), timing and counting the round trips of every
  DeliveryRepository call (store_updates with its defer, inbox_row, reply, finish, the
  outbox's add_reply/record_sent/close...) and of procrastinate's fetch_job/finish_job.

    python -m bench delivery [--chats 50] [--messages 10] [--processes 1,2,4] [--delay 0]
    tgagent bench delivery ...
    python -m bench.delivery ...

`--source DIR` runs the throughput part with another checkout's `tgagent bot` (e.g. the
release before the inbox: `git archive c4994dd | tar -x -C /tmp/old`), one process only.

Uses DATABASE_URL / PG_HOST like the application; without them, a temporary embedded
server. Timings are reported here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import functools
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.harness import DbCounter, fresh_schema, server
from bench.model_server import ROOT, SUMMARY_MODEL, ModelServerProcess
from src.config import Settings
from src.storage.migrations import migrate
from src.storage.pg_client import make_pool

TOKEN = "123456:BENCH-TOKEN"
QUIET_LOGGERS = ("httpx", "httpcore", "openai", "pgserver", "src", "procrastinate", "telegram")
FIRST_CHAT = 7_000_000  # chats (private, chat id = user id) start here
WARM_CHAT = 6_000_000  # chats that warm each process up before the clock starts
DEFAULT_CONCURRENCY = Settings.model_fields["worker_concurrency"].default
STALL_SECONDS = 120.0  # no reply for this long: the run is given up (and reported)

# What the queue's path is made of: the inbox/outbox repository and procrastinate's manager.
REPO_METHODS = (
    "store_updates",
    "inbox_row",
    "stored_message_id",
    "record_message",
    "finish",
    "add_reply",
    "reply",
    "record_sent",
    "record_attempt",
    "close",
)
JOB_METHODS = ("fetch_job", "finish_job")


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def bot_env(dsn: str, tg_url: str, model_url: str, concurrency: int | None) -> dict[str, str]:
    """Return the environment a `tgagent bot`/`worker` process of the bench runs with."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("PG", "DATABASE_", "TELEGRAM_", "OPENAI_", "WEBHOOK_", "ALLOWED_", "ADMIN_")
        )
    }
    env |= {
        "DATABASE_URL": dsn,
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_API_BASE_URL": tg_url,
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "bench",
        "LLM_MAX_RETRIES": "0",
        "LLM_TIMEOUT": "30",
        "SUMMARY_MODEL": SUMMARY_MODEL,
        "COMPACT_MODEL": SUMMARY_MODEL,
        # Not what is measured, and a local embedding model per process would spend the
        # machine's cores: history search embeds nothing here.
        "EMBEDDING_PROVIDER": "off",
        "USER_RATE_LIMIT": "0",
        "LOG_LEVEL": "WARNING",
    }
    if concurrency is not None:
        env["WORKER_CONCURRENCY"] = str(concurrency)
    return env


def settings_for(dsn: str, tg_url: str, model_url: str, concurrency: int | None) -> Settings:
    """Return the settings the in-process bot runs with (those of `bot_env`)."""
    values: dict[str, Any] = {
        "database_url": dsn,
        "telegram_bot_token": TOKEN,
        "telegram_api_base_url": tg_url,
        "openai_base_url": model_url,
        "openai_api_key": "bench",
        "llm_max_retries": 0,
        "llm_timeout": 30.0,
        "summary_model": SUMMARY_MODEL,
        "compact_model": SUMMARY_MODEL,
        "embedding_provider": "off",
        "user_rate_limit": 0,
    }
    if concurrency is not None:
        values["worker_concurrency"] = concurrency
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


class Processes:
    """`tgagent bot` and `tgagent worker` child processes, stopped with SIGTERM."""

    def __init__(self, env: dict[str, str], source: Path | None) -> None:
        self.env = dict(env)
        if source is not None:
            self.env["PYTHONPATH"] = str(source)
        self.children: list[subprocess.Popen[bytes]] = []
        self._cwd = tempfile.TemporaryDirectory(prefix="tgab-deliv-")  # no .env here

    def start(self, command: str) -> None:
        code = "import sys; from src.cli import main; sys.exit(main())"
        self.children.append(
            subprocess.Popen(
                [sys.executable, "-c", code, command],
                cwd=self._cwd.name,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )

    def check(self) -> None:
        for child in self.children:
            if child.poll() is not None:
                err = child.stderr.read().decode(errors="replace") if child.stderr else ""
                raise RuntimeError(f"a bench process exited ({child.returncode}):\n{err[-3000:]}")

    def stop(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in self.children:
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self.children.clear()
        self._cwd.cleanup()


async def migrated(dsn: str) -> None:
    """Migrate the schema once, before any process starts (they would race to)."""
    pool = make_pool(dsn, 1, 2)
    await pool.open()
    try:
        await pool.wait(timeout=30)
        await migrate(pool)
    finally:
        await pool.close()


async def queue_workers(dsn: str) -> int:
    """Return how many procrastinate workers are registered (0 before its schema)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        try:
            row = await (
                await conn.execute("SELECT count(*) FROM procrastinate_workers")
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            return 0
    return int(row[0]) if row else 0


async def wait_for(check: Any, what: str, patience: float = 60.0, poll: Any = None) -> None:
    deadline = time.monotonic() + patience
    while not await check():
        if poll is not None:
            poll()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def replies_to(tg: Any, chats: range) -> list[dict[str, Any]]:
    with tg._lock:
        return [m for m in tg.sent if m["method"] == "sendMessage" and m["chat_id"] in chats]


async def push_and_wait(
    tg: Any, chats: range, messages: int, poll: Any = None
) -> tuple[float, float, int]:
    """Push `messages` messages from each chat, wait for one reply each; return (first push
    time, last reply time, replies)."""
    want = len(chats) * messages
    started = time.time()
    for k in range(messages):
        for chat in chats:
            tg.push_text(chat, f"Сообщение {k + 1}: как спланировать неделю?", first_name="Bench")
    last_count, last_change = 0, time.monotonic()
    while True:
        got = replies_to(tg, chats)
        if len(got) >= want:
            break
        if poll is not None:
            poll()
        if len(got) != last_count:
            last_count, last_change = len(got), time.monotonic()
        elif time.monotonic() - last_change > STALL_SECONDS:
            log(f"  stalled at {len(got)}/{want} replies")
            break
        await asyncio.sleep(0.02)
    return started, max((m["time"] for m in got), default=started), len(got)


async def warm_up(tg: Any, processes: int, poll: Any = None) -> None:
    """Give every process a few turns first (imports, connections, the model client)."""
    await push_and_wait(tg, range(WARM_CHAT, WARM_CHAT + 4 * processes), 1, poll)
    await asyncio.sleep(0.5)


async def throughput(
    base_dsn: str,
    tg: Any,
    model_url: str,
    processes: int,
    chats: int,
    messages: int,
    concurrency: int | None,
    source: Path | None = None,
) -> dict[str, Any]:
    """Run `tgagent bot` plus `processes - 1` workers and time N x M turns."""
    async with fresh_schema(base_dsn, "deliv") as (dsn, _):
        tg.reset()
        if source is None:
            await migrated(dsn)
        procs = Processes(bot_env(dsn, tg.base_url, model_url, concurrency), source)
        try:
            procs.start("bot")

            async def polling() -> bool:
                return bool(tg.calls_of("getUpdates"))

            await wait_for(polling, "tgagent bot to poll", poll=procs.check)
            for _ in range(processes - 1):
                procs.start("worker")
            if source is None:

                async def registered() -> bool:
                    return await queue_workers(dsn) >= processes

                await wait_for(registered, f"{processes} queue workers", poll=procs.check)
            await warm_up(tg, processes, procs.check)
            span = range(FIRST_CHAT, FIRST_CHAT + chats)
            started, ended, replies = await push_and_wait(tg, span, messages, procs.check)
            procs.check()
        finally:
            procs.stop()
    seconds = max(ended - started, 1e-9)
    return {
        "processes": processes,
        "turns": chats * messages,
        "replies": replies,
        "lost": chats * messages - replies,
        "seconds": round(seconds, 3),
        "turns_per_s": round(replies / seconds, 2),
    }


# --- the queue's own cost, in this process --------------------------------------------

_IN_QUEUE: contextvars.ContextVar[bool] = contextvars.ContextVar("in_queue", default=False)


class QueueCounter(DbCounter):
    """DbCounter that also counts, apart, what happens inside the queue's calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def _count(self, key: str) -> None:
        super()._count(key)
        if _IN_QUEUE.get():
            self.counts["queue_" + key] += 1

    def timed(self, label: str) -> Any:
        def make(original: Any) -> Any:
            @functools.wraps(original)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                if _IN_QUEUE.get():  # nested: the outer call counts it
                    return await original(*args, **kwargs)
                token = _IN_QUEUE.set(True)
                start = time.perf_counter()
                try:
                    return await original(*args, **kwargs)
                finally:
                    self.seconds[label] += time.perf_counter() - start
                    self.calls[label] += 1
                    _IN_QUEUE.reset(token)

            return wrapper

        return make

    def job_timer(self, original: Any) -> Any:
        @functools.wraps(original)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                self.seconds["job"] += time.perf_counter() - start
                self.calls["job"] += 1

        return wrapper

    def install(self) -> None:
        super().install()
        from procrastinate.manager import JobManager

        from src.bot.queue import UpdateWorker
        from src.storage.delivery_repo import DeliveryRepository

        for name in REPO_METHODS:
            self._patch(DeliveryRepository, name, self.timed(name))
        for name in JOB_METHODS:
            self._patch(JobManager, name, self.timed(name))
        self._patch(UpdateWorker, "handle", self.job_timer)

    def reset(self) -> None:
        self.counts.clear()
        self.calls.clear()
        self.seconds.clear()


@contextlib.asynccontextmanager
async def bot_in_process(settings: Settings) -> AsyncIterator[Any]:
    """Run build_application + serve in this loop, as tests/e2e start_bot does."""
    from src.bot.app import build_application, serve
    from src.bot.state import state_of

    app = build_application(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(serve(app, stop))
    try:

        async def ready() -> bool:
            if task.done():
                task.result()
            state = state_of(app)
            return bool(app.running and state.ready())

        await wait_for(ready, "the in-process bot")
        yield app
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


async def queue_cost(
    base_dsn: str, tg: Any, model_url: str, chats: int, messages: int, concurrency: int | None
) -> dict[str, Any]:
    """Run the one-process configuration in this process, counting the queue's path."""
    counter = QueueCounter()
    async with fresh_schema(base_dsn, "deliv") as (dsn, _):
        tg.reset()
        await migrated(dsn)
        settings = settings_for(dsn, tg.base_url, model_url, concurrency)
        with counter.installed():
            async with bot_in_process(settings):
                await warm_up(tg, 1)
                counter.reset()
                span = range(FIRST_CHAT, FIRST_CHAT + chats)
                started, ended, replies = await push_and_wait(tg, span, messages)
                counts, calls = dict(counter.counts), dict(counter.calls)
                seconds = dict(counter.seconds)
    turns = max(replies, 1)
    wall = max(ended - started, 1e-9)
    methods = {
        name: {
            "calls_per_turn": round(calls[name] / turns, 2),
            "ms_per_turn": round(1000 * seconds[name] / turns, 3),
        }
        for name in (*REPO_METHODS, *JOB_METHODS)
        if calls.get(name)
    }
    queue_ms = sum(seconds.get(n, 0.0) for n in (*REPO_METHODS, *JOB_METHODS))
    return {
        "turns": chats * messages,
        "replies": replies,
        "lost": chats * messages - replies,
        "turns_per_s": round(replies / wall, 2),
        "queue": {
            "round_trips_per_turn": round(counts.get("queue_round_trips", 0) / turns, 2),
            "statements_per_turn": round(counts.get("queue_statements", 0) / turns, 2),
            "commits_per_turn": round(counts.get("queue_commits", 0) / turns, 2),
            "ms_per_turn": round(1000 * queue_ms / turns, 3),
        },
        "turn": {
            "round_trips_per_turn": round(counts.get("round_trips", 0) / turns, 2),
            "statements_per_turn": round(counts.get("statements", 0) / turns, 2),
            "job_ms": round(1000 * seconds.get("job", 0.0) / max(calls.get("job", 0), 1), 3),
            "wall_ms_per_turn": round(1000 * wall / turns, 3),
        },
        "methods": methods,
    }


# --- the whole run ----------------------------------------------------------------------


async def run(
    chats: int,
    messages: int,
    processes: Sequence[int] = (1, 2, 4),
    delay: float = 0.0,
    concurrency: int | None = None,
    dsn: str | None = None,
    source: Path | None = None,
    cost: bool = True,
) -> dict[str, Any]:
    """Run every configuration and return the figures (and what they ran on)."""
    from tests.fakes.bot_api_server import FakeBotAPI

    started = time.perf_counter()
    with (
        server(dsn) as (base_dsn, label),
        ModelServerProcess(delay) as model,
        FakeBotAPI(TOKEN, max_poll_timeout=1.0) as tg,
    ):
        async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as conn:
            row = await (await conn.execute("SHOW server_version")).fetchone()
        runs = []
        for n in processes:
            log(f"{n} working process(es): {chats} chats x {messages} messages")
            runs.append(
                await throughput(
                    base_dsn, tg, model.base_url, n, chats, messages, concurrency, source
                )
            )
            log(f"  {runs[-1]['turns_per_s']} turns/s")
        queue = None
        if cost and source is None:
            log("queue cost, one process in this one")
            queue = await queue_cost(base_dsn, tg, model.base_url, chats, messages, concurrency)
        await model.aclose()
    return {
        "meta": {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "database": label,
            "postgres": row[0] if row else "?",
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "chats": chats,
            "messages": messages,
            "delay": delay,
            "worker_concurrency": concurrency
            or Settings.model_fields["worker_concurrency"].default,
            "source": str(source) if source else None,
            "seconds": round(time.perf_counter() - started, 1),
        },
        "throughput": runs,
        "queue_cost": queue,
    }


def render(result: dict[str, Any]) -> str:
    """Return the figures as markdown tables."""
    meta = result["meta"]
    lines = [
        f"Delivery bench, {meta['at']}: {meta['chats']} chats x {meta['messages']} messages, "
        f"model delay {meta['delay']} s, WORKER_CONCURRENCY={meta['worker_concurrency']}, "
        f"{meta['cpus']} CPUs, PostgreSQL {meta['postgres']} ({meta['database']})"
        + (f", tgagent from {meta['source']}" if meta["source"] else ""),
        "",
        "| working processes | turns | replies | seconds | turns/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result["throughput"]:
        name = (
            "`tgagent bot`"
            if r["processes"] == 1
            else (f"`tgagent bot` + {r['processes'] - 1} `tgagent worker`")
        )
        lines.append(
            f"| {r['processes']} ({name}) | {r['turns']} | {r['replies']} | {r['seconds']} "
            f"| {r['turns_per_s']} |"
        )
    cost = result.get("queue_cost")
    if cost:
        q, t = cost["queue"], cost["turn"]
        lines += [
            "",
            f"Queue's own cost per turn (one process, in the bench's; {cost['replies']} turns, "
            f"{cost['turns_per_s']} turns/s):",
            "",
            "| | round trips | statements | ms |",
            "|---|---:|---:|---:|",
            f"| inbox/queue/outbox path | {q['round_trips_per_turn']} "
            f"| {q['statements_per_turn']} | {q['ms_per_turn']} |",
            f"| whole turn (job ms: handle; wall: 1 / throughput) | {t['round_trips_per_turn']} "
            f"| {t['statements_per_turn']} | job {t['job_ms']}, wall {t['wall_ms_per_turn']} |",
            "",
            "| call | calls per turn | ms per turn |",
            "|---|---:|---:|",
        ]
        for name, m in cost["methods"].items():
            lines.append(f"| {name} | {m['calls_per_turn']} | {m['ms_per_turn']} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chats", type=int, default=50, help="chats writing at once (50)")
    parser.add_argument("--messages", type=int, default=10, help="messages per chat (10)")
    parser.add_argument(
        "--processes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 2, 4],
        help="working processes per configuration (1,2,4): `tgagent bot` + the rest workers",
    )
    parser.add_argument("--delay", type=float, default=0.0, help="model latency, seconds (0)")
    parser.add_argument(
        "--concurrency", type=int, help="WORKER_CONCURRENCY per process (the default)"
    )
    parser.add_argument(
        "--source", type=Path, help="run another checkout's `tgagent bot` (throughput only)"
    )
    parser.add_argument("--no-cost", action="store_true", help="skip the queue-cost run")
    parser.add_argument("--out", type=Path, help="also write the JSON result here")


async def run_and_report(args: argparse.Namespace) -> int:
    """Run, print the tables, write the JSON; exit code 1 if a reply was lost."""
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    source = args.source.resolve() if args.source else None
    if source is not None and args.processes != [1]:
        log("--source runs one process only (the release before the inbox has no workers)")
        args.processes = [1]
    result = await run(
        args.chats,
        args.messages,
        args.processes,
        args.delay,
        args.concurrency,
        source=source,
        cost=not args.no_cost,
    )
    print(render(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    lost = sum(r["lost"] for r in result["throughput"])
    lost += (result["queue_cost"] or {}).get("lost", 0)
    return 1 if lost else 0


async def _command(args: argparse.Namespace, settings: Any) -> int:
    _importable_tests()
    return await run_and_report(args)


def register(sub: Any) -> None:
    """Add `tgagent bench delivery [options]` to `tgagent bench`'s subcommands."""
    parser = sub.add_parser(
        "delivery",
        help="turns/s with 1, 2, 4 working processes; the queue's cost per turn",
        description=__doc__.splitlines()[0],
    )
    add_arguments(parser)
    parser.set_defaults(handler=_command)


def _importable_tests() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # tests.fakes lives in the source checkout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench delivery", description=__doc__.splitlines()[0]
    )
    add_arguments(parser)
    _importable_tests()
    return asyncio.run(run_and_report(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
