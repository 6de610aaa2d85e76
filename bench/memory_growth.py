"""Memory growth: a 300-turn synthetic conversation, tokens sent per turn vs full history.

Runs the real AgentService (graph, PostgreSQL, summarizer, fact extraction) against the
tests' local OpenAI-compatible server, then reports, at turns 10, 50, 100 and 300, the
tokens sent to the chat model against the size of the whole stored history, and the
input tokens of every summarizer call (fact extraction and summary update). The fake
summary model is deliberately greedy: each update returns the old summary plus a line
per new message, so only the summarizer's own limits keep its input bounded.

    python -m bench.memory_growth [--turns 300] [--context-limit 16000] [--out PATH]

Uses DATABASE_URL / PG_HOST if set (a fresh schema, dropped afterwards), else a
temporary embedded server. Tokens are counted with the application's counter
(TOKEN_COUNTER; offline that is the approximate one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from src.config import Settings, load_settings
from src.graph import prompts
from src.graph.tokens import PER_MESSAGE_OVERHEAD, TokenCounter, make_counter
from src.services.agent_service import Identity
from src.services.factory import build_runtime
from src.storage.pg_client import describe_dsn, make_pool

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "memory_growth.json"
CHAT, SUMMARY, COMPACT = "bench-chat", "bench-summary", "bench-compact"
CHECKPOINTS = (10, 50, 100, 300)
USER = Identity(4_000_001, "bench", "Bench", "ru")

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
FACTS = [
    ("name", "Меня зовут Алексей.", "fact"),
    ("city", "Я живу в Нижнем Новгороде.", "fact"),
    ("budget", "Бюджет на ремонт — не больше 300 тысяч.", "constraint"),
    ("tea", "Люблю зелёный чай без сахара.", "preference"),
    ("db", "Кажется, тормозит база, но я не уверен.", "hypothesis"),
]
FILLER = (
    "Расскажи подробнее, какие есть варианты и что выбрать в моей ситуации. "
    "Мне важно понять плюсы и минусы, сроки и примерную стоимость. "
    "Also, what would you do first if you were me? "
)


def _import_fake() -> Any:
    try:
        from tests.fakes import openai_server
    except ModuleNotFoundError:
        sys.path.insert(0, str(ROOT))
        from tests.fakes import openai_server
    return openai_server


def user_text(turn: int) -> str:
    """Return the synthetic user's message of `turn` (1-based): 100 to 450 characters."""
    topic = TOPICS[(turn // 7) % len(TOPICS)]
    text = f"Сообщение {turn}. Давай обсудим {topic}. "
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


def summary_reply(request: dict[str, Any]) -> str:
    """Play a greedy summary model: facts as JSON; the summary only ever grows."""
    system = request["messages"][0]["content"]
    prompt = request["messages"][-1]["content"]
    if system == prompts.FACTS_SYSTEM:
        found = [
            {"key": key, "value": text, "type": kind, "importance": 8 if kind != "fact" else 9}
            for key, text, kind in FACTS
            if text in prompt
        ]
        return json.dumps(found, ensure_ascii=False)
    old = prompt.split("Current summary (empty at first):\n", 1)[-1].split("\n\nNew messages:")[0]
    new = prompt.split("New messages:\n", 1)[-1].split("\n\nRules:")[0]
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


def request_tokens(request: dict[str, Any], counter: TokenCounter, fake: Any) -> int:
    """Return the tokens of a recorded request's messages, as our counter sees them."""
    return sum(
        counter.count(fake.message_text(m)) + PER_MESSAGE_OVERHEAD for m in request["messages"]
    )


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


async def run(turns: int, context_limit: int) -> dict[str, Any]:
    """Play the conversation and collect the measurements."""
    fake = _import_fake()
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
        )
        counter = make_counter(settings.llm_model, settings.token_counter)
        async with schema(base_dsn) as dsn:
            pool = make_pool(dsn, 1, 4)
            await pool.open()
            await pool.wait(timeout=30)
            try:
                rt = await build_runtime(settings, pool=pool)
                per_turn = await play(rt, llm, fake, counter, turns)
                await rt.close()
            finally:
                await pool.close()
    calls = per_turn.pop("summarizer_calls")
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
        },
        "turns": per_turn,
        "summarizer_calls": calls,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


async def play(rt: Any, llm: Any, fake: Any, counter: TokenCounter, turns: int) -> dict[str, Any]:
    """Run the turns; return per-checkpoint rows and every summarizer call's size."""
    history = 0
    rows: dict[str, Any] = {}
    calls: list[dict[str, Any]] = []
    seen = 0
    for turn in range(1, turns + 1):
        text = user_text(turn)
        result = await rt.service.handle_message(USER, text)
        if not result.ok:
            raise RuntimeError(f"turn {turn} failed: {result.reply}")
        await rt.service.drain()
        chat = llm.requests_for(CHAT)[-1]
        sent = request_tokens(chat, counter, fake)
        # The full history: every message stored so far, as the model would be sent it.
        history += counter.count(result.reply) + counter.count(text) + 2 * PER_MESSAGE_OVERHEAD
        summary_requests = llm.requests_for(SUMMARY)
        for request in summary_requests[seen:]:
            kind = (
                "facts" if request["messages"][0]["content"] == prompts.FACTS_SYSTEM else "summary"
            )
            calls.append(
                {"turn": turn, "kind": kind, "tokens": request_tokens(request, counter, fake)}
            )
        seen = len(summary_requests)
        if turn in CHECKPOINTS or turn == turns:
            conv = await rt.deps.conversations.get_or_create_conversation(USER.owner_id)
            row = await rt.deps.conversations.get_conversation(conv)
            rows[str(turn)] = {
                "sent": sent,
                "context_tokens": result.context_tokens,
                "full_history": history,
                "summary_tokens": counter.count(row["summary"]),
                "facts": len(await rt.deps.memory.list_facts(USER.owner_id)),
                "summarizer_calls": len(calls),
            }
    return {**rows, "summarizer_calls": calls}


def report(result: dict[str, Any]) -> None:
    """Print the results as two small tables."""
    s = result["settings"]
    print(result["benchmark"])
    print(
        f"database: {result['database']}; token counter: {result['counter']}; context limit "
        f"{s['context_limit']} (reply {s['llm_max_output_tokens']}); MAX_CONTEXT="
        f"{s['max_context']}, SUMMARY_TRIGGER={s['summary_trigger']}, "
        f"SUMMARY_STRATEGY={s['summary_strategy']}\n"
    )
    head = f"{'turn':>5} | {'sent to model':>13} | {'full history':>12} | {'sent/full':>9} |"
    print(head + f" {'summary':>7} | {'facts':>5} | {'summarizer calls':>16}")
    for turn, r in result["turns"].items():
        ratio = r["sent"] / r["full_history"] if r["full_history"] else 0
        print(
            f"{turn:>5} | {r['sent']:>13,} | {r['full_history']:>12,} | {ratio:>9.2f} |"
            f" {r['summary_tokens']:>7,} | {r['facts']:>5} | {r['summarizer_calls']:>16}"
        )
    calls = result["summarizer_calls"]
    print("\nsummarizer input tokens per call (fact extraction + summary update):")
    print(f"{'kind':>8} | {'calls':>5} | {'min':>6} | {'median':>6} | {'max':>6} | first → last")
    for kind in ("facts", "summary"):
        sizes = [c["tokens"] for c in calls if c["kind"] == kind]
        if sizes:
            print(
                f"{kind:>8} | {len(sizes):>5} | {min(sizes):>6,} | "
                f"{int(statistics.median(sizes)):>6,} | {max(sizes):>6,} | "
                f"{sizes[0]:,} → {sizes[-1]:,}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the memory-growth benchmark from the command line."""
    parser = argparse.ArgumentParser(prog="python -m bench.memory_growth", description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--context-limit", type=int, default=16_000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.turns, args.context_limit))
    report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
