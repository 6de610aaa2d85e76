"""The web page's tornado application: routes, settings, the access log, the server."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.runnables.graph import Graph
from psycopg_pool import AsyncConnectionPool
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.web import Application, RequestHandler

from src.config import Settings
from src.devtools.graph_view import offline_graph
from src.devtools.web.auth import Guard, without_token

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent


@dataclass
class WebContext:
    """What every handler needs: the database, the settings, the token rules, the graph."""

    pool: AsyncConnectionPool[Any]
    settings: Settings
    guard: Guard
    drawable: Graph

    @classmethod
    def create(cls, pool: AsyncConnectionPool[Any], settings: Settings, guard: Guard) -> WebContext:
        """Return the context, compiling the graph once (no I/O) for its drawing."""
        return cls(pool, settings, guard, offline_graph(settings).get_graph())


def log_request(handler: RequestHandler) -> None:
    """Log one line per request, never the `?token=` a browser may have sent."""
    request = handler.request
    status = handler.get_status()
    level = logging.INFO if status < 400 else logging.WARNING
    logger.log(
        level,
        "%d %s %s %.1f ms",
        status,
        request.method,
        without_token(request.uri or ""),
        request.request_time() * 1000,
    )


def make_app(context: WebContext) -> Application:
    """Return the application: every route, the static files and templates it serves."""
    from src.devtools.web.handlers import (
        GraphHandler,
        GuardedStatic,
        ReplayHandler,
        RunsHandler,
        TurnHandler,
    )

    return Application(
        [
            (r"/", RunsHandler),
            (r"/graph", GraphHandler),
            (r"/turn/([0-9A-Za-z-]+)/([0-9A-Za-z-]+)", TurnHandler),
            (r"/replay", ReplayHandler),
        ],
        template_path=str(HERE / "templates"),
        static_path=str(HERE / "static"),
        static_handler_class=GuardedStatic,
        xsrf_cookies=True,
        cross_origin_protection=True,
        xsrf_cookie_kwargs={"httponly": True, "samesite": "Strict"},
        log_function=log_request,
        tgagent=context,
    )


def listen(app: Application, host: str, port: int) -> tuple[HTTPServer, int]:
    """Start serving `app` on host:port (0: any free port); return the server and port."""
    sockets = bind_sockets(port, host)
    server = HTTPServer(app)
    server.add_sockets(sockets)
    return server, int(sockets[0].getsockname()[1])
