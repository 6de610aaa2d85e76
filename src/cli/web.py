"""`tgagent web`: serve the web page on the bot's database until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from src.config import Settings

CLOSE_SECONDS = 5.0
"""How long Ctrl-C waits for open connections to close before the command exits."""


async def web_command(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the page on --host/--port; refuse beyond loopback without WEB_TOKEN."""
    from src.devtools.common import opened_pool, require_checkpoint_tables
    from src.devtools.web.app import WebContext, listen, make_app
    from src.devtools.web.auth import Guard

    token = settings.web_token.get_secret_value() if settings.web_token else None
    guard = Guard.for_host(args.host, token)  # before touching the database
    async with opened_pool(settings) as pool:
        await require_checkpoint_tables(pool)
        app = make_app(WebContext.create(pool, settings, guard))
        server, port = listen(app, args.host, args.port)
        where = f"[{args.host}]" if ":" in args.host else args.host
        rule = "every request needs WEB_TOKEN" if guard.token else "loopback only, no token"
        sys.stdout.write(f"tgagent web: http://{where}:{port}/ ({rule}); Ctrl-C stops it\n")
        sys.stdout.flush()
        try:
            await asyncio.Event().wait()
        finally:
            server.stop()
            # Browsers keep connections open: close them, never waiting long to exit.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.close_all_connections(), CLOSE_SECONDS)
    return 0


def register(sub: Any, db_sub: Any) -> None:
    """Add `tgagent web`."""
    from src.cli.devtools import reporting

    del db_sub
    web = sub.add_parser("web", help="a local web page: the graph, runs node by node, replay")
    web.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    web.add_argument("--port", type=int, default=8765, help="port to listen on (8765)")
    web.set_defaults(handler=reporting(web_command))
