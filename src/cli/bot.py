"""`tgagent bot`: run the Telegram bot until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from src.config import Settings


def register(sub: Any, db_sub: Any) -> None:
    """Add `tgagent bot`."""
    parser = sub.add_parser(
        "bot",
        help="run the Telegram bot (polling, or a webhook when WEBHOOK_URL is set)",
        description="Run the Telegram bot until SIGINT/SIGTERM. Needs TELEGRAM_BOT_TOKEN.",
    )
    parser.set_defaults(handler=run_bot, receive=True)
    worker = sub.add_parser(
        "worker",
        help="only work: answer the updates `tgagent bot` (or a webhook receiver) stored",
        description=(
            "Run the inbox's jobs (turns, commands) and the periodic jobs until SIGINT/SIGTERM,"
            " without receiving updates: start any number of them, on any machine sharing"
            " DATABASE_URL. Needs TELEGRAM_BOT_TOKEN (it sends the replies)."
        ),
    )
    worker.set_defaults(handler=run_bot, receive=False)


async def run_bot(args: argparse.Namespace, settings: Settings) -> int:
    """Run the bot (or only a worker, `args.receive` false); return the exit code."""
    if settings.telegram_bot_token is None:
        print(  # noqa: T201
            "tgagent: TELEGRAM_BOT_TOKEN is not set: get a token from @BotFather and put "
            "TELEGRAM_BOT_TOKEN=... in .env",
            file=sys.stderr,
        )
        return 2
    if settings.mcp_config is not None:
        from src.graph.mcp.config import load_config

        load_config(settings.mcp_config)  # a bad file: one line before anything starts
    receive = getattr(args, "receive", True)
    if receive and settings.webhook_url and settings.webhook_secret_token is None:
        from src.config import WEBHOOK_SECRET_MISSING

        print(f"tgagent: {WEBHOOK_SECRET_MISSING}", file=sys.stderr)  # noqa: T201
        return 2
    from telegram.error import InvalidToken, NetworkError

    from src.bot.app import build_application, serve

    app = build_application(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        with contextlib.suppress(NotImplementedError):  # not on Windows
            loop.add_signal_handler(sig, stop.set)
    try:
        await serve(app, stop, receive=receive)
    except InvalidToken:
        print("tgagent: Telegram rejected TELEGRAM_BOT_TOKEN", file=sys.stderr)  # noqa: T201
        return 2
    except NetworkError as exc:
        print(f"tgagent: cannot reach the Telegram Bot API: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    finally:
        for sig in signals:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(sig)
    return 0
