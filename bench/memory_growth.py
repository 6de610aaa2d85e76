"""Memory growth: a 5,000-turn synthetic conversation, what memory costs per turn.

Runs the real AgentService (graph, PostgreSQL, summarizer, fact extraction) against the
tests' local OpenAI-compatible server and reports:

- at turns 10, 50, 100, 300, 1,000 and 5,000: the tokens sent to the chat model against
  the size of the whole stored history, the running summary and the facts stored;
- for the 100 turns ending at turns 100, 1,000 and 5,000 (1-100, 901-1,000,
  4,901-5,000): the summary model's and the fact model's calls and input tokens, which
  must stay flat per turn however long the conversation gets;
- facts per user after 1,000 turns and at the end, which MAX_FACTS must bound.

The synthetic user states a fact never stated before every other turn (2,500 distinct
keys over 5,000 turns, 500 by turn 1,000) and repeats five core facts now and then, so
MAX_FACTS (200) is really reached. The fake summary model answers tgagent's memory
prompts from their text: fact extraction with `{"facts": [...]}` read from the user's
lines (through the structured output the server validates), summary updates greedily on
purpose (the old summary plus a line per new message), so only the product's own limits
keep the inputs bounded.

    python -m bench.memory_growth [--turns 5000] [--context-limit 16000]
        [--max-facts 200] [--facts-every 10] [--prune-every 500] [--out PATH]

Uses DATABASE_URL / PG_HOST if set (a fresh schema, dropped afterwards), else a
temporary embedded server. Tokens are counted with the application's counter
(TOKEN_COUNTER; offline that is the approximate one) on the messages the fake server
received (not the tools' or the response format's schemas). The server's record of
requests is emptied after every turn, so a long run does not keep every prompt in memory,
and LangGraph checkpoints are pruned every 500 turns, as the bot's daily job does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from src.config import Settings, load_settings
from src.devtools.prune import prune_checkpoints
from src.graph import prompts
from src.graph.tokens import PER_MESSAGE_OVERHEAD, TokenCounter, make_counter
from src.services.agent_service import Identity
from src.services.factory import build_runtime
from src.storage.pg_client import describe_dsn, make_pool

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "memory_growth.json"
CHAT, SUMMARY, COMPACT = "bench-chat", "bench-summary", "bench-compact"
TURNS = 5_000
# Turns at which the chat request is compared with the full history.
CHECKPOINTS = (10, 50, 100, 300, 1_000, 5_000)
# Memory-model input is summed over the WINDOW turns ending at each of these turns.
WINDOW = 100
WINDOW_MARKS = (100, 1_000, 5_000)
# Turns after which the facts stored for the user are counted (and at the end).
FACTS_AT = (1_000,)
# The bot prunes LangGraph checkpoints daily (CHECKPOINT_KEEP turns per conversation);
# the bench does it every PRUNE_EVERY turns (0: never). Without it every turn reads a
# growing checkpoint history: 100 turns took twice as long at turn 5,000 as at turn 100.
PRUNE_EVERY = 500
USER = Identity(4_000_001, "bench", "Bench", "ru")
MEMORY_KINDS = ("summary", "facts")

TOPICS = [
    "план переезда в Казань",
    "ремонт кухни и бюджет",
    "подготовку к марафону",
    "выбор ноутбука для работы",
    "поездку в Грузию в мае",
    "курс по статистике",
    "аллергию на орехи у дочери",
    "migration of the billing service to PostgreSQL",
]
# Core facts, repeated now and then: the same keys, updated rather than added.
FACTS = [
    ("name", "Меня зовут Алексей.", "fact"),
    ("city", "Я живу в Нижнем Новгороде.", "fact"),
    ("budget", "Бюджет на ремонт — не больше 300 тысяч.", "constraint"),
    ("tea", "Люблю зелёный чай без сахара.", "preference"),
    ("db", "Кажется, тормозит база, но я не уверен.", "hypothesis"),
]
# A new fact every NEW_FACT_EVERY turns: "Запомни: мой проект 00017 — код 34512."
# Numbers are written at a fixed width (here and in "Сообщение 00017"): a number with
# more digits is more tokens, which would read as growth where there is none.
NEW_FACT_EVERY = 2
THINGS = {"проект": "project", "контакт": "contact", "рецепт": "recipe", "маршрут": "route"}
NEW_FACT = re.compile(r"Запомни: мой (\w+) (\d+) — ([^.\n]+)\.")
NEW_FACT_IMPORTANCE = 5
FILLER = (
    "Расскажи подробнее, какие есть варианты и что выбрать в моей ситуации. "
    "Мне важно понять плюсы и минусы, сроки и примерную стоимость. "
    "Also, what would you do first if you were me? "
)
_LINE = re.compile(r"^\[(user|assistant|tool|system|summary)\]: ?(.*)$")


def _import_fake() -> Any:
    try:
        from tests.fakes import openai_server
    except ModuleNotFoundError:
        sys.path.insert(0, str(ROOT))
        from tests.fakes import openai_server
    return openai_server


def new_fact(turn: int) -> str:
    """Return the new fact the user states at `turn` ("" on turns without one)."""
    if turn % NEW_FACT_EVERY:
        return ""
    n = turn // NEW_FACT_EVERY
    thing = list(THINGS)[n % len(THINGS)]
    return f"Запомни: мой {thing} {n:05d} — код {n * 7919 % 100_000:05d}."


def stated_keys(turns: int) -> int:
    """Return how many distinct fact keys the user has stated by the end of `turns`."""
    core = {FACTS[(t // 23) % len(FACTS)][0] for t in range(23, turns + 1, 23)}
    return turns // NEW_FACT_EVERY + len(core)


def user_text(turn: int) -> str:
    """Return the synthetic user's message of `turn` (1-based): 110 to 340 characters."""
    topic = TOPICS[(turn // 7) % len(TOPICS)]
    text = f"Сообщение {turn:05d}. "
    fact = new_fact(turn)
    if fact:
        text += fact + " "
    text += f"Давай обсудим {topic}. "
    if turn % 23 == 0:
        text += FACTS[(turn // 23) % len(FACTS)][1] + " "
    return text + FILLER[: 60 + (turn * 37) % 260]


def chat_reply(request: dict[str, Any]) -> str:
    """Answer like an assistant: 300 to 900 characters, about the last message."""
    n = len(request.get("messages", []))
    base = (
        "Хорошо, давайте разберём по шагам. Сначала определим цель и ограничения, затем "
        "сравним два-три варианта по цене, срокам и рискам. "
    )
    return base * (1 + n % 4) + "Что из этого важнее всего для вас?"


def section(prompt: str, start: str, end: str | None = None) -> str:
    """Return the text of `prompt` between the marker `start` and the marker `end`."""
    after = prompt.split(start, 1)[-1]
    return after.split(end, 1)[0] if end else after


def user_lines(text: str) -> list[str]:
    """Return the user's lines of a memory prompt's `[role]: text` transcript."""
    lines = (_LINE.match(line.strip()) for line in text.splitlines())
    return [m.group(2) for m in lines if m and m.group(1) == "user"]


def facts_answer(prompt: str) -> dict[str, Any]:
    """Answer the facts prompt: every fact the user states in its messages."""
    found: dict[str, dict[str, Any]] = {}
    for line in user_lines(section(prompt, "Messages:\n", "\n\nAnswer with")):
        for key, text, kind in FACTS:
            if text in line:
                importance = 9 if kind == "fact" else 8
                found[key] = {"key": key, "value": text, "type": kind, "importance": importance}
        for thing, n, value in NEW_FACT.findall(line):
            key = f"{THINGS.get(thing, 'item')}_{n}"
            fact = {"key": key, "value": value, "type": "fact"}
            found[key] = {**fact, "importance": NEW_FACT_IMPORTANCE}
    return {"facts": list(found.values())}


def summary_reply(request: dict[str, Any]) -> str:
    """Play a greedy summary model: facts as asked; the summary only ever grows."""
    system = request["messages"][0]["content"]
    prompt = request["messages"][-1]["content"]
    if system == prompts.FACTS_SYSTEM:
        return json.dumps(facts_answer(prompt), ensure_ascii=False)
    old = section(prompt, "Current summary (empty at first):\n", "\n\nNew messages:")
    new = section(prompt, "New messages:\n", "\n\nRules:")
    lines = [line[:100].rstrip() + "." for line in new.splitlines() if line.strip()]
    return ("" if old == "(empty)" else old + "\n") + "\n".join(lines)


def compact_reply(request: dict[str, Any]) -> str:
    return json.dumps({"summary": "Обсуждали планы.", "topics": ["планы"], "lastAction": "—"})


def route(request: dict[str, Any]) -> str:
    model = request.get("model")
    if model == SUMMARY:
        return summary_reply(request)
    if model == COMPACT:
        return compact_reply(request)
    return chat_reply(request)


def request_kind(request: dict[str, Any], fake: Any) -> str:
    """Return what a recorded request is: chat, summary, facts, compact or other."""
    model = request.get("model")
    if model == CHAT:
        return "chat"
    if model == COMPACT:
        return "compact"
    messages = request.get("messages") or []
    system = fake.message_text(messages[0]) if messages else ""
    if system == prompts.FACTS_SYSTEM:
        return "facts"
    if system == prompts.SUMMARIZER_SYSTEM:
        return "summary"
    return "other"


def known_keys(request: dict[str, Any], fake: Any) -> int:
    """Return how many known fact keys a facts request listed."""
    prompt = fake.message_text(request["messages"][-1])
    line = prompt.split("\n\nMessages:\n", 1)[0].rsplit("\n", 1)[-1].strip()
    return 0 if line in ("", "(none yet)") else len(line.split(", "))


def request_tokens(request: dict[str, Any], counter: TokenCounter, fake: Any) -> int:
    """Return the tokens of a recorded request's messages, as our counter sees them."""
    return sum(
        counter.count(fake.message_text(m)) + PER_MESSAGE_OVERHEAD for m in request["messages"]
    )


def take_requests(llm: Any) -> list[dict[str, Any]]:
    """Return the requests recorded since the last call, and forget them.

    Called between turns, when the service has drained and nothing is in flight: the
    server would otherwise keep every request body of the run (hundreds of megabytes).
    """
    taken = list(llm.requests)
    del llm.requests[: len(taken)]
    return taken


@contextlib.contextmanager
def database() -> Iterator[tuple[str, str]]:
    """Yield (dsn, label): the configured server, else a temporary embedded one."""
    dsn = load_settings().server_dsn()
    if dsn is not None:
        yield dsn, describe_dsn(dsn)
        return
    import pgserver

    with tempfile.TemporaryDirectory(prefix="tgam-", dir="/tmp") as tmp:
        server = pgserver.get_server(Path(tmp) / "pg", cleanup_mode="stop")
        try:
            yield str(server.get_uri()), "embedded pgserver (temporary)"
        finally:
            server.cleanup()


@contextlib.asynccontextmanager
async def schema(base_dsn: str) -> AsyncIterator[str]:
    """Yield a DSN on a fresh schema; drop the schema afterwards."""
    name = f"bench_mem_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as admin:
        await admin.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield psycopg.conninfo.make_conninfo(base_dsn, options=f"-c search_path={name}")
    finally:
        async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as admin:
            await admin.execute(f'DROP SCHEMA "{name}" CASCADE')


async def run(
    turns: int,
    context_limit: int,
    max_facts: int | None = None,
    facts_every: int | None = None,
    prune_every: int = PRUNE_EVERY,
) -> dict[str, Any]:
    """Play the conversation and collect the measurements."""
    fake = _import_fake()
    memory: dict[str, Any] = {}
    if max_facts is not None:
        memory["max_facts"] = max_facts
    if facts_every is not None:
        memory["facts_every"] = facts_every
    started = time.perf_counter()
    with fake.FakeOpenAI() as llm, database() as (base_dsn, label):
        llm.default_reply = route
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            openai_base_url=llm.base_url,
            openai_api_key="bench",
            llm_model=CHAT,
            summary_model=SUMMARY,
            compact_model=COMPACT,
            llm_max_retries=0,
            default_context_limit=context_limit,
            **memory,
        )
        counter = make_counter(settings.llm_model, settings.token_counter)
        async with schema(base_dsn) as dsn:
            pool = make_pool(dsn, 1, 4)
            await pool.open()
            await pool.wait(timeout=30)
            try:
                rt = await build_runtime(settings, pool=pool)
                played = await play(rt, llm, fake, counter, turns, prune_every=prune_every)
                await rt.close()
            finally:
                await pool.close()
    return {
        "benchmark": "memory growth over a synthetic conversation",
        "database": label,
        "counter": counter.name,
        "settings": {
            "context_limit": context_limit,
            "max_context": settings.max_context,
            "summary_trigger": settings.summary_trigger,
            "summary_strategy": settings.summary_strategy,
            "llm_max_output_tokens": settings.llm_max_output_tokens,
            "facts_every": settings.facts_every,
            "max_facts": settings.max_facts,
            "checkpoint_keep": settings.checkpoint_keep,
            "prune_every": prune_every,
        },
        **played,
        "seconds": round(time.perf_counter() - started, 1),
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


async def count_facts(rt: Any) -> int:
    """Return how many facts are stored for the bench's user."""
    return len(await rt.deps.memory.list_facts(USER.owner_id, 1_000_000))


def window_row(
    per_turn: dict[str, list[int]], first: int, last: int, keys: list[int]
) -> dict[str, Any]:
    """Sum the memory models' calls and input tokens over turns first..last."""
    row: dict[str, Any] = {"turns": f"{first}-{last}", "first": first, "last": last}
    span = last - first + 1
    for kind in MEMORY_KINDS:
        tokens = sum(per_turn[f"{kind}_tokens"][first : last + 1])
        row[f"{kind}_calls"] = sum(per_turn[f"{kind}_calls"][first : last + 1])
        row[f"{kind}_tokens"] = tokens
        row[f"{kind}_tokens_per_turn"] = round(tokens / span, 1)
    row["known_keys_max"] = max(keys, default=0)
    return row


async def play(
    rt: Any,
    llm: Any,
    fake: Any,
    counter: TokenCounter,
    turns: int,
    *,
    checkpoints: Sequence[int] = CHECKPOINTS,
    window: int = WINDOW,
    window_marks: Sequence[int] = WINDOW_MARKS,
    facts_at: Sequence[int] = FACTS_AT,
    prune_every: int = PRUNE_EVERY,
) -> dict[str, Any]:
    """Run the turns; return the checkpoint rows, the memory models' input per window,
    facts per user and statistics of every memory-model call."""
    history = 0
    rows: dict[str, Any] = {}
    facts_per_user: dict[str, int] = {}
    per_turn = {
        f"{kind}_{what}": [0] * (turns + 1) for kind in MEMORY_KINDS for what in ("calls", "tokens")
    }
    sizes: dict[str, list[int]] = {kind: [] for kind in (*MEMORY_KINDS, "compact", "other")}
    keys: list[int] = [0] * (turns + 1)
    windows: list[dict[str, Any]] = []
    clock, cpu = time.perf_counter(), time.process_time()
    for turn in range(1, turns + 1):
        text = user_text(turn)
        result = await rt.service.handle_message(USER, text)
        if not result.ok:
            raise RuntimeError(f"turn {turn} failed: {result.reply}")
        await rt.service.drain()
        sent = 0
        for request in take_requests(llm):
            kind = request_kind(request, fake)
            tokens = request_tokens(request, counter, fake)
            if kind == "chat":
                sent = tokens  # the last chat request of the turn (after any tools)
                continue
            sizes[kind].append(tokens)
            if kind in MEMORY_KINDS:
                per_turn[f"{kind}_calls"][turn] += 1
                per_turn[f"{kind}_tokens"][turn] += tokens
            if kind == "facts":
                keys[turn] = max(keys[turn], known_keys(request, fake))
        if prune_every and turn % prune_every == 0:
            await prune_checkpoints(rt.pool, rt.settings.checkpoint_keep)
        # The full history: every message stored so far, as the model would be sent it.
        history += counter.count(result.reply) + counter.count(text) + 2 * PER_MESSAGE_OVERHEAD
        if turn % window == 0:
            first = turn - window + 1
            windows.append(window_row(per_turn, first, turn, keys[first : turn + 1]))
            # Wall time, and the CPU time of this process (the rest: PostgreSQL, waits).
            windows[-1]["seconds"] = round(time.perf_counter() - clock, 2)
            windows[-1]["cpu_seconds"] = round(time.process_time() - cpu, 2)
            clock, cpu = time.perf_counter(), time.process_time()
        if turn in facts_at or turn == turns:
            facts_per_user[str(turn)] = await count_facts(rt)
        if turn in checkpoints or turn == turns:
            conv = await rt.deps.conversations.get_or_create_conversation(USER.owner_id)
            row = await rt.deps.conversations.get_conversation(conv)
            rows[str(turn)] = {
                "sent": sent,
                "context_tokens": result.context_tokens,
                "full_history": history,
                "summary_tokens": counter.count(row["summary"]),
                "facts": await count_facts(rt),
                "summary_calls": sum(per_turn["summary_calls"]),
                "fact_calls": sum(per_turn["facts_calls"]),
            }
    if turns % window:  # the last, partial window
        first = turns - turns % window + 1
        windows.append(window_row(per_turn, first, turns, keys[first:]))
    marked = [w for w in windows if w["last"] in window_marks]
    if windows and windows[-1] not in marked:
        marked.append(windows[-1])  # a shorter run still reports its last window
    calls = {
        kind: {
            "calls": len(s),
            "min": min(s),
            "median": int(statistics.median(s)),
            "max": max(s),
            "first": s[0],
            "last": s[-1],
        }
        for kind, s in sizes.items()
        if s
    }
    return {
        "turns": rows,
        "memory_input": marked,
        "windows": windows,
        "facts_per_user": facts_per_user,
        "stated_fact_keys": stated_keys(turns),
        "memory_calls": calls,
    }


def report(result: dict[str, Any]) -> None:
    """Print the results as small tables."""
    s = result["settings"]
    print(result["benchmark"])
    print(
        f"database: {result['database']}; token counter: {result['counter']}; context limit "
        f"{s['context_limit']} (reply {s['llm_max_output_tokens']}); MAX_CONTEXT="
        f"{s['max_context']}, SUMMARY_TRIGGER={s['summary_trigger']}, "
        f"SUMMARY_STRATEGY={s['summary_strategy']}, FACTS_EVERY={s['facts_every']}, "
        f"MAX_FACTS={s['max_facts']}\n"
    )
    head = f"{'turn':>5} | {'sent to model':>13} | {'full history':>12} | {'sent/full':>9} |"
    print(head + f" {'summary':>7} | {'facts':>5} | {'summary calls':>13} | {'fact calls':>10}")
    for turn, r in result["turns"].items():
        ratio = r["sent"] / r["full_history"] if r["full_history"] else 0
        print(
            f"{turn:>5} | {r['sent']:>13,} | {r['full_history']:>12,} | {ratio:>9.2f} |"
            f" {r['summary_tokens']:>7,} | {r['facts']:>5} | {r['summary_calls']:>13,} |"
            f" {r['fact_calls']:>10,}"
        )
    print("\nmemory-model input tokens over the turns ending at each checkpoint:")
    print(
        f"{'turns':>11} | {'summary calls':>13} | {'summary input':>13} | {'per turn':>8} |"
        f" {'fact calls':>10} | {'fact input':>10} | {'per turn':>8} | {'keys listed':>11}"
    )
    for w in result["memory_input"]:
        print(
            f"{w['turns']:>11} | {w['summary_calls']:>13,} | {w['summary_tokens']:>13,} |"
            f" {w['summary_tokens_per_turn']:>8,.1f} | {w['facts_calls']:>10,} |"
            f" {w['facts_tokens']:>10,} | {w['facts_tokens_per_turn']:>8,.1f} |"
            f" {w['known_keys_max']:>11}"
        )
    print("\nmemory-model input tokens per call, whole run:")
    print(f"{'kind':>8} | {'calls':>5} | {'min':>6} | {'median':>6} | {'max':>6} | first → last")
    for kind, c in result["memory_calls"].items():
        print(
            f"{kind:>8} | {c['calls']:>5} | {c['min']:>6,} | {c['median']:>6,} | "
            f"{c['max']:>6,} | {c['first']:,} → {c['last']:,}"
        )
    facts = ", ".join(f"after {int(t):,} turns: {n}" for t, n in result["facts_per_user"].items())
    print(
        f"\nfacts per user (MAX_FACTS={s['max_facts']}): {facts}; "
        f"distinct fact keys the user stated: {result['stated_fact_keys']:,}"
    )
    if "seconds" in result:
        print(f"run time: {result['seconds']:,.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the memory-growth benchmark from the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.memory_growth",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--context-limit", type=int, default=16_000)
    parser.add_argument("--max-facts", type=int, default=None, help="MAX_FACTS (default 200)")
    parser.add_argument("--facts-every", type=int, default=None, help="FACTS_EVERY (default 10)")
    parser.add_argument(
        "--prune-every",
        type=int,
        default=PRUNE_EVERY,
        help="prune checkpoints as the bot's daily job does, every N turns (0: never)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = asyncio.run(
        run(args.turns, args.context_limit, args.max_facts, args.facts_every, args.prune_every)
    )
    report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
