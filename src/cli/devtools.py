"""`tgagent graph`, `tgagent runs list|show`, `tgagent replay`, `tgagent db prune`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from src.config import Settings

Handler = Callable[[argparse.Namespace, "Settings"], Coroutine[Any, Any, int]]
FORMATS = ("mermaid", "ascii", "html", "png")
"""What `tgagent graph --format` draws (src/devtools/graph_view.py renders each)."""


def _out(text: str) -> None:
    sys.stdout.write(text.rstrip("\n") + "\n")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def reporting(handler: Handler) -> Handler:
    """Turn a DevtoolsError into one line on stderr and its exit code."""

    async def run(args: argparse.Namespace, settings: Settings) -> int:
        from src.devtools.common import DevtoolsError

        try:
            return await handler(args, settings)
        except DevtoolsError as exc:
            sys.stderr.write(f"tgagent: {exc}\n")
            return exc.code

    return run


async def graph_command(args: argparse.Namespace, settings: Settings) -> int:
    """Draw the graph in the chosen format."""
    from src.devtools.common import DevtoolsError
    from src.devtools.graph_view import offline_graph, render_ascii, render_png
    from src.devtools.html_page import render_html

    drawable = offline_graph(settings).get_graph()
    out: Path | None = args.out
    if args.format == "png":
        if out is None:
            raise DevtoolsError("--format png needs --out FILE.png")
        kind = await asyncio.to_thread(render_png, drawable, out)
        _out(f"wrote {out} (rendered by {kind})")
        return 0
    if args.format == "mermaid":
        text = drawable.draw_mermaid()
    elif args.format == "ascii":
        text = render_ascii(drawable)
    else:
        text = render_html(drawable)
    if out is None:
        _out(text)
    else:
        await asyncio.to_thread(out.write_text, text, encoding="utf-8")
        _out(f"wrote {out} ({args.format}, {len(text.encode())} bytes)")
    return 0


async def runs_list_command(args: argparse.Namespace, settings: Settings) -> int:
    """List the newest turns."""
    from src.devtools.checkpoints import CheckpointReader
    from src.devtools.common import opened_pool, require_checkpoint_tables
    from src.devtools.runs import format_turn_list, turn_summary

    async with opened_pool(settings) as pool:
        await require_checkpoint_tables(pool)
        turns = await CheckpointReader(pool).recent_turns(args.user, args.limit)
    if args.json:
        _out(json.dumps([turn_summary(t) for t in turns], ensure_ascii=False, indent=2))
    else:
        _out(format_turn_list(turns))
    return 0


async def runs_show_command(args: argparse.Namespace, settings: Settings) -> int:
    """Show one turn node by node."""
    from src.devtools.checkpoints import CheckpointReader
    from src.devtools.common import opened_pool, require_checkpoint_tables
    from src.devtools.runs import detail_json, format_turn_detail, turn_detail

    async with opened_pool(settings) as pool:
        await require_checkpoint_tables(pool)
        detail = await turn_detail(CheckpointReader(pool), args.thread, args.checkpoint)
    if args.json:
        _out(json.dumps(detail_json(detail), ensure_ascii=False, indent=2))
    else:
        _out(format_turn_detail(detail))
    return 0


async def replay_command(args: argparse.Namespace, settings: Settings) -> int:
    """Replay a turn from a checkpoint and print both replies."""
    from src.devtools.common import opened_pool, require_checkpoint_tables
    from src.devtools.replay import replay
    from src.devtools.replay_view import format_outcome, outcome_json

    async with opened_pool(settings) as pool:
        await require_checkpoint_tables(pool)
        outcome = await replay(
            pool,
            settings,
            args.thread,
            args.checkpoint,
            model=args.model,
            commit=args.commit,
            live_tools=args.live_tools,
        )
    if args.json:
        _out(json.dumps(outcome_json(outcome), ensure_ascii=False, indent=2))
    else:
        _out(format_outcome(outcome))
    return 0 if outcome.error is None else 4


async def prune_command(args: argparse.Namespace, settings: Settings) -> int:
    """Prune checkpoints to the last CHECKPOINT_KEEP turns per conversation."""
    from src.devtools.common import opened_pool
    from src.devtools.prune import prune_checkpoints

    keep = args.keep or settings.checkpoint_keep
    async with opened_pool(settings) as pool:
        totals = await prune_checkpoints(pool, keep)
    _out(
        f"kept the last {keep} turns per conversation: deleted {totals['turns_deleted']} turns "
        f"({totals['checkpoints_deleted']} checkpoints, {totals['writes_deleted']} writes, "
        f"{totals['blobs_deleted']} blobs) in {_count(totals['threads_pruned'], 'thread')}, "
        f"and {_count(totals['orphan_threads_deleted'], 'thread')} of deleted conversations"
    )
    return 0


def register(sub: Any, db_sub: Any) -> None:
    """Add the developer commands to `tgagent` and `tgagent db`."""
    graph = sub.add_parser("graph", help="draw the conversation graph")
    graph.add_argument("--format", choices=FORMATS, default="mermaid")
    graph.add_argument("--out", type=Path, help="write to FILE (needed for png)")
    graph.set_defaults(handler=reporting(graph_command))

    runs = sub.add_parser("runs", help="past turns, from the checkpointer")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    listing = runs_sub.add_parser("list", help="newest turns first")
    listing.add_argument("--user", type=int, help="only this Telegram user's (or group's) turns")
    listing.add_argument("--limit", type=_positive, default=20, help="most turns shown (20)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=reporting(runs_list_command))
    show = runs_sub.add_parser("show", help="one turn, node by node")
    show.add_argument("thread", help="conversation id (or a unique prefix)")
    show.add_argument("--checkpoint", help="any checkpoint of the turn (default: the last turn)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=reporting(runs_show_command))

    replay = sub.add_parser("replay", help="re-run a turn from a checkpoint, beside the record")
    replay.add_argument("thread", help="conversation id (or a unique prefix)")
    replay.add_argument("--checkpoint", required=True, help="checkpoint id (or a unique prefix)")
    replay.add_argument("--model", help="chat model on the configured endpoint (LLM_MODEL)")
    replay.add_argument(
        "--commit", action="store_true", help="keep the replay as a fork of the thread"
    )
    replay.add_argument(
        "--live-tools",
        action="store_true",
        help="call the MCP tools (default: the results recorded when the turn ran)",
    )
    replay.add_argument("--json", action="store_true", help="print JSON")
    replay.set_defaults(handler=reporting(replay_command))

    prune = db_sub.add_parser("prune", help="keep the last CHECKPOINT_KEEP turns per conversation")
    prune.add_argument("--keep", type=_positive, help="turns to keep (default CHECKPOINT_KEEP)")
    prune.set_defaults(handler=reporting(prune_command))
