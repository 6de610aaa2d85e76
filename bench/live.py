"""Live replies: how soon an answer shows, and what showing it costs in Bot API calls.

Drives `tgagent bot` in its own process (build_application + serve with its own event loop
and GIL, as deployed) against the fake Bot API (tests/fakes/bot_api_server.py, a thread of
this process, which stamps every call it accepts), the bench model server (tests' FakeOpenAI
in its own process: it waits `--ttft` seconds, then streams `--words` words one every
`--pace` seconds, and stamps when each request came and when its first content chunk went
out) and real PostgreSQL, each bot on a fresh schema dropped afterwards. Every stamp is
`time.time()` on this machine.

- latency: `--turns` private turns over `--chats` chats writing at once, each chat's next
  message pushed when its answer is whole. Per turn: the push; the model request's arrival
  and its first content chunk; the first visible text (the first accepted sendMessageDraft,
  or the first sendMessage in a group); the whole reply. p50/p95 of each, and of first
  visible minus first token, whose p95 should be at most TARGET_MS.
- calls per reply: Bot API calls by method (accepted or refused) per answered turn, in
  private chats and in groups (the bot mentioned), with live replies (the latency run, then
  COMPARE_TURNS turns in each of `--chats` groups) and with STREAM_REPLIES=false (a second
  bot, COMPARE_TURNS turns in each private chat and each group).

    python -m bench live [--turns 40] [--chats 8] [--ttft 0.5] [--words 60] [--pace 0.1]
                         [--compare-turns 2] [--out PATH] [--json]
    tgagent bench live ...

Uses DATABASE_URL / PG_HOST like the application; without them, a temporary embedded
server. Timings are reported here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.delivery import (
    QUIET_LOGGERS,
    TOKEN,
    Processes,
    bot_env,
    log,
    migrated,
    wait_for,
)
from bench.harness import fresh_schema, percentile, server
from bench.model_server import ROOT, SUMMARY_MODEL, ModelServerProcess, words_reply
from src.bot.formatting import split_message
from src.bot.live import STOP_DATA

TARGET_MS = 300.0  # first visible text at most this long after the model's first token (p95)
COMPARE_TURNS = 2  # turns per chat in the group and STREAM_REPLIES=false runs
SETTLE = 1.0  # seconds after the last reply before calls are counted (late ones count too)
STALL_SECONDS = 60.0  # no whole reply in a chat for this long: the turn is lost
# Chat ids: each run its own block, so no run sees another's messages.
PRIVATE_BASE = 7_100_000
GROUP_BASE = -1_007_100_000
GROUP_USER_BASE = 7_500_000
WARM_RUN = 9  # the block of the chats that warm a bot up
METHODS = (
    "sendMessageDraft",
    "sendMessage",
    "editMessageText",
    "editMessageReplyMarkup",
    "deleteMessage",
    "sendChatAction",
)


@dataclass
class Turn:
    """One message and the stamps of its answer (seconds since the epoch)."""

    chat: int
    tag: str
    """Written in the message, to find the model request it caused."""
    pushed: float
    final: float | None = None
    """When Telegram (the fake) accepted the whole reply; None: it never came."""
    first_visible: float | None = None
    model_arrived: float | None = None
    model_first: float | None = None
    """When the model server wrote the answer's first content chunk."""
    late_drafts: int = 0
    """Drafts accepted after the whole reply (before the chat's next message)."""


def chats_of(kind: str, run: int, count: int) -> list[int]:
    """Return `count` chat ids of one run's block."""
    if kind == "private":
        return [PRIVATE_BASE + 1000 * run + i for i in range(count)]
    return [GROUP_BASE - 1000 * run - i for i in range(count)]


def push(tg: Any, chat: int, tag: str) -> None:
    """Send the bot one message from `chat`: a private message, or a mention in a group."""
    text = f"{tag} Как спланировать неделю?"
    if chat > 0:
        tg.push_text(chat, text, first_name="Bench")
        return
    user = GROUP_USER_BASE + (GROUP_BASE - chat)
    mention = f"@{tg.bot_user['username']} {text}"
    tg.push_text(user, mention, chat_id=chat, chat_type="supergroup", first_name="Bench")


def is_final(entry: dict[str, Any], last_part: str) -> bool:
    """Tell whether a sent or edited message is the reply's last part (no Stop button)."""
    markup = str(entry["params"].get("reply_markup") or "")
    return entry["text"] == last_part and STOP_DATA not in markup


async def whole_reply(tg: Any, turn: Turn, last_part: str, poll: Callable[[], None]) -> None:
    """Wait until the turn's whole reply was accepted; stamp it (or give up, STALL_SECONDS)."""
    deadline = time.monotonic() + STALL_SECONDS
    while time.monotonic() < deadline:
        for entry in tg.messages_to(turn.chat):
            if entry["time"] >= turn.pushed and is_final(entry, last_part):
                turn.final = entry["time"]
                return
        poll()
        await asyncio.sleep(0.02)
    log(f"  no whole reply in chat {turn.chat} after {STALL_SECONDS:.0f} s ({turn.tag})")


async def converse(
    tg: Any, turns: dict[int, int], last_part: str, poll: Callable[[], None]
) -> list[Turn]:
    """Let every chat write its turns at once, each message after the previous answer."""

    async def chat_turns(chat: int, count: int) -> list[Turn]:
        done: list[Turn] = []
        for k in range(count):
            turn = Turn(chat, f"[{chat}/{k}]", time.time())
            push(tg, chat, turn.tag)
            await whole_reply(tg, turn, last_part, poll)
            done.append(turn)
            if turn.final is None:
                break  # the chat is stuck: its next turns would wait behind this one
        return done

    runs = await asyncio.gather(*(chat_turns(c, n) for c, n in turns.items()))
    return [turn for run in runs for turn in run]


def stamp_visible(tg: Any, turns: list[Turn]) -> None:
    """Stamp each turn's first visible text (a draft with text or a sent message), and
    count the drafts that came after its whole reply."""
    for i, turn in enumerate(turns):
        if turn.final is None:
            continue
        drafts = [d["time"] for d in tg.drafts_to(turn.chat) if d["text"].strip()]
        sent = [m["time"] for m in tg.messages_to(turn.chat) if m["method"] == "sendMessage"]
        window = [t for t in drafts + sent if turn.pushed <= t <= turn.final]
        turn.first_visible = min(window, default=turn.final)
        after = (
            turns[i + 1].pushed if i + 1 < len(turns) and turns[i + 1].chat == turn.chat else None
        )
        turn.late_drafts = sum(turn.final < t and (after is None or t < after) for t in drafts)


def stamp_model(entries: list[dict[str, Any]], turns: list[Turn]) -> None:
    """Stamp each turn with the first chat-model request that carried its message."""
    asked = sorted(
        (e for e in entries if e.get("model") != SUMMARY_MODEL and e.get("arrived")),
        key=lambda e: e["arrived"],
    )
    for turn in turns:
        found = next((e for e in asked if any(turn.tag in m for m in e["messages"])), None)
        if found is not None:
            turn.model_arrived, turn.model_first = found["arrived"], found["first_content"]


def count_calls(tg: Any, chats: set[int], since: float) -> tuple[Counter[str], Counter[str]]:
    """Return the Bot API calls made to `chats` since `since`, by method: all, and accepted."""

    def ours(entry: dict[str, Any], chat: Any) -> bool:
        with contextlib.suppress(TypeError, ValueError):
            return int(chat) in chats and entry["time"] >= since
        return False

    calls = Counter(c["method"] for c in list(tg.calls) if ours(c, c["params"].get("chat_id")))
    accepted = Counter(m["method"] for m in list(tg.sent) if ours(m, m["chat_id"]))
    accepted["sendMessageDraft"] = sum(ours(d, d["chat_id"]) for d in list(tg.drafts))
    accepted["sendChatAction"] = sum(ours(a, a["chat_id"]) for a in list(tg.actions))
    accepted["deleteMessage"] = sum(ours(d, d["chat_id"]) for d in list(tg.deleted))
    accepted["editMessageReplyMarkup"] = sum(ours(e, e["chat_id"]) for e in list(tg.markup_edits))
    return calls, accepted


def ms(values: Sequence[float]) -> dict[str, float]:
    """Return n, p50 and p95 of durations in seconds, in milliseconds."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(1000 * percentile(values, 0.5), 1),
        "p95": round(1000 * percentile(values, 0.95), 1),
    }


def between(
    turns: list[Turn], start: Callable[[Turn], float | None], end: Callable[[Turn], float | None]
) -> dict[str, float]:
    """Return `ms` of end - start over the turns that have both stamps."""
    return ms([e - s for t in turns if (s := start(t)) is not None and (e := end(t)) is not None])


def run_result(
    kind: str, stream: bool, turns: list[Turn], calls: Counter[str], accepted: Counter[str]
) -> dict[str, Any]:
    """Return one run's figures: its latencies and its calls per reply."""
    done = [t for t in turns if t.final is not None]
    replies = max(len(done), 1)
    refused = {m: calls[m] - accepted[m] for m in calls if calls[m] > accepted[m]}
    return {
        "kind": kind,
        "stream": stream,
        "turns": len(turns),
        "replies": len(done),
        "lost": len(turns) - len(done),
        "ms": {
            "request": between(done, lambda t: t.pushed, lambda t: t.model_arrived),
            "first_token": between(done, lambda t: t.pushed, lambda t: t.model_first),
            "first_visible": between(done, lambda t: t.pushed, lambda t: t.first_visible),
            "visible_after_token": between(
                done, lambda t: t.model_first, lambda t: t.first_visible
            ),
            "whole": between(done, lambda t: t.pushed, lambda t: t.final),
        },
        "calls_per_reply": {m: round(n / replies, 2) for m, n in sorted(calls.items())},
        "refused_per_reply": {m: round(n / replies, 2) for m, n in sorted(refused.items())},
        "late_drafts": sum(t.late_drafts for t in turns),
        "turn_stamps": [asdict(t) for t in turns],
    }


@contextlib.asynccontextmanager
async def running_bot(
    base_dsn: str, tg: Any, model_url: str, stream: bool
) -> AsyncIterator[Callable[[], None]]:
    """Run `tgagent bot` on a fresh schema; yield the check that it still runs."""
    async with fresh_schema(base_dsn, "live") as (dsn, _):
        tg.reset()
        await migrated(dsn)
        env = bot_env(dsn, tg.base_url, model_url, None)
        env["STREAM_REPLIES"] = "true" if stream else "false"
        procs = Processes(env, None)
        try:
            procs.start("bot")

            async def polling() -> bool:
                return bool(tg.calls_of("getUpdates"))

            await wait_for(polling, "tgagent bot to poll", poll=procs.check)
            yield procs.check
            procs.check()
        finally:
            procs.stop()


async def one_run(
    tg: Any,
    model: ModelServerProcess,
    kind: str,
    stream: bool,
    turns: dict[int, int],
    last_part: str,
    poll: Callable[[], None],
) -> dict[str, Any]:
    """Let `turns` chats write, then stamp and count what their answers took."""
    log(f"{kind} chats, live replies {'on' if stream else 'off'}: {sum(turns.values())} turns")
    started = time.time()
    done = await converse(tg, turns, last_part, poll)
    await asyncio.sleep(SETTLE)
    stamp_visible(tg, done)
    stamp_model(await model.take(), done)
    calls, accepted = count_calls(tg, set(turns), started)
    return run_result(kind, stream, done, calls, accepted)


async def warm_up(
    tg: Any, model: ModelServerProcess, last_part: str, poll: Callable[[], None]
) -> None:
    """Give the bot a private and a group turn first (imports, connections, the graph)."""
    chats = [*chats_of("private", WARM_RUN, 1), *chats_of("group", WARM_RUN, 1)]
    await converse(tg, dict.fromkeys(chats, 1), last_part, poll)
    await model.take()


def spread(turns: int, chats: list[int]) -> dict[int, int]:
    """Share `turns` among `chats` as evenly as possible (chats with none are left out)."""
    share = {
        c: turns // len(chats) + (1 if i < turns % len(chats) else 0) for i, c in enumerate(chats)
    }
    return {c: n for c, n in share.items() if n}


async def run(
    turns: int = 40,
    chats: int = 8,
    ttft: float = 0.5,
    words: int = 60,
    pace: float = 0.1,
    dsn: str | None = None,
    compare_turns: int = COMPARE_TURNS,
) -> dict[str, Any]:
    """Run the latency and the calls-per-reply runs; return the figures."""
    from tests.fakes.bot_api_server import FakeBotAPI

    started = time.perf_counter()
    last_part = split_message(words_reply(words))[-1]
    runs: list[dict[str, Any]] = []
    with (
        server(dsn) as (base_dsn, label),
        ModelServerProcess(ttft, pace, stream_words=True, words=words) as model,
        FakeBotAPI(TOKEN, max_poll_timeout=1.0) as tg,
    ):
        async with await psycopg.AsyncConnection.connect(base_dsn, autocommit=True) as conn:
            row = await (await conn.execute("SHOW server_version")).fetchone()
        for stream in (True, False):
            async with running_bot(base_dsn, tg, model.base_url, stream) as poll:
                await warm_up(tg, model, last_part, poll)
                for kind in ("private", "group"):
                    block = len(runs)
                    if stream and kind == "private":  # the latency run
                        plan = spread(turns, chats_of(kind, block, chats))
                    else:
                        plan = dict.fromkeys(chats_of(kind, block, chats), compare_turns)
                    runs.append(await one_run(tg, model, kind, stream, plan, last_part, poll))
        await model.aclose()
    latency = runs[0]
    after = latency["ms"]["visible_after_token"]
    return {
        "meta": {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "database": label,
            "postgres": row[0] if row else "?",
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "turns": turns,
            "chats": chats,
            "ttft": ttft,
            "words": words,
            "pace": pace,
            "compare_turns": compare_turns,
            "seconds": round(time.perf_counter() - started, 1),
        },
        "target": {
            "visible_after_token_p95_ms": TARGET_MS,
            "measured_p95_ms": after.get("p95"),
            "met": after.get("n", 0) > 0 and after["p95"] <= TARGET_MS,
        },
        "runs": runs,
    }


def _p(stats: dict[str, float]) -> str:
    return f"{stats['p50']:.0f} / {stats['p95']:.0f}" if stats.get("n") else "-"


def render(result: dict[str, Any]) -> str:
    """Return the figures as markdown tables."""
    meta, target = result["meta"], result["target"]
    latency = result["runs"][0]
    lat = latency["ms"]
    lines = [
        f"Live replies bench, {meta['at']}: model first token after {meta['ttft']} s, then "
        f"{meta['words']} words one every {meta['pace']} s; {meta['chats']} chats at once; "
        f"{meta['cpus']} CPUs, PostgreSQL {meta['postgres']} ({meta['database']}); "
        "`tgagent bot` and the model server in their own processes",
        "",
        f"Private chats, live replies on: {latency['replies']} of {latency['turns']} turns "
        "answered",
        "",
        "| from the user's message to | p50 ms | p95 ms |",
        "|---|---:|---:|",
    ]
    for key, name in (
        ("request", "the model request"),
        ("first_token", "the model's first token"),
        ("first_visible", "the first visible text (a draft)"),
        ("whole", "the whole reply"),
    ):
        if lat[key].get("n"):
            lines.append(f"| {name} | {lat[key]['p50']} | {lat[key]['p95']} |")
    after = lat["visible_after_token"]
    if after.get("n"):
        gap = round(lat["first_visible"]["p95"] - lat["first_token"]["p95"], 1)
        verdict = "met" if target["met"] else f"missed by {after['p95'] - TARGET_MS:.1f} ms"
        lines += [
            f"| first visible - first token, per turn | {after['p50']} | {after['p95']} |",
            "",
            f"Target: first visible at most {TARGET_MS:.0f} ms after the first token at p95: "
            f"{verdict} (the p95s differ by {gap} ms).",
        ]
    methods = [m for m in METHODS if any(m in r["calls_per_reply"] for r in result["runs"])]
    methods += sorted({m for r in result["runs"] for m in r["calls_per_reply"]} - set(methods))
    lines += [
        "",
        "Bot API calls per reply (refused ones included, and counted apart):",
        "",
        "| chat | live | replies | first visible p50 / p95 ms | visible - token p50 / p95 ms | "
        + " | ".join(methods)
        + " | all | refused |",
        "|---|---|---:|---:|---:|" + "---:|" * (len(methods) + 2),
    ]
    for r in result["runs"]:
        calls = r["calls_per_reply"]
        cells = [f"{calls.get(m, 0):g}" for m in methods]
        refused = ", ".join(f"{m} {n:g}" for m, n in r["refused_per_reply"].items()) or "0"
        lines.append(
            f"| {r['kind']} | {'on' if r['stream'] else 'off'} | {r['replies']}/{r['turns']} "
            f"| {_p(r['ms']['first_visible'])} | {_p(r['ms']['visible_after_token'])} | "
            + " | ".join(cells)
            + f" | {sum(calls.values()):.2f} | {refused} |"
        )
    late = [f"{r['kind']} {r['late_drafts']}" for r in result["runs"] if r["late_drafts"]]
    if late:
        lines += ["", f"Drafts accepted after the whole reply: {', '.join(late)}."]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--turns", type=int, default=40, help="private turns of the latency run (40)"
    )
    parser.add_argument("--chats", type=int, default=8, help="chats writing at once (8)")
    parser.add_argument(
        "--ttft", type=float, default=0.5, help="model's time to first token, seconds (0.5)"
    )
    parser.add_argument("--words", type=int, default=60, help="words of each answer (60)")
    parser.add_argument(
        "--pace", type=float, default=0.1, help="seconds between the model's words (0.1)"
    )
    parser.add_argument(
        "--compare-turns",
        type=int,
        default=COMPARE_TURNS,
        help=f"turns per chat of the group and STREAM_REPLIES=false runs ({COMPARE_TURNS})",
    )
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    parser.add_argument("--json", action="store_true", help="print the JSON, not the tables")


async def run_and_report(args: argparse.Namespace) -> int:
    """Run, print the tables (or the JSON); exit code 1 if a reply was lost."""
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    result = await run(
        args.turns, args.chats, args.ttft, args.words, args.pace, compare_turns=args.compare_turns
    )
    text = json.dumps(result, indent=2, ensure_ascii=False) + "\n"
    print(text if args.json else render(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 1 if any(r["lost"] for r in result["runs"]) else 0


async def _command(args: argparse.Namespace, settings: Any) -> int:
    _importable_tests()
    return await run_and_report(args)


def register(sub: Any) -> None:
    """Add `tgagent bench live [options]` to `tgagent bench`'s subcommands."""
    parser = sub.add_parser(
        "live",
        help="how soon a live reply shows; Bot API calls per reply, live and not",
        description=__doc__.splitlines()[0],
    )
    add_arguments(parser)
    parser.set_defaults(handler=_command)


def _importable_tests() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # tests.fakes lives in the source checkout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench live", description=__doc__.splitlines()[0]
    )
    add_arguments(parser)
    _importable_tests()
    return asyncio.run(run_and_report(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
