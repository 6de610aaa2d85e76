"""The web page's request handlers: runs, one turn, the graph, replay. Every one checks
the token rules first (`GuardedHandler.prepare`); only the replay form writes, and only
what `tgagent replay` writes."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from tornado.web import HTTPError, RequestHandler, StaticFileHandler

from src.devtools.checkpoints import CheckpointReader
from src.devtools.common import (
    EXIT_ENVIRONMENT,
    EXIT_INCOMPATIBLE,
    DevtoolsError,
    missing_tables,
    shorten,
)
from src.devtools.graph_view import node_tools
from src.devtools.html_page import render_svg
from src.devtools.replay import replay
from src.devtools.runs import turn_detail
from src.devtools.web.app import WebContext
from src.devtools.web.auth import COOKIE, host_name, is_loopback, without_token
from src.devtools.web.runs_query import STATUSES, RunFilter, find_runs
from src.devtools.web.turn_view import turn_id_of, turn_view
from src.graph.tokens import make_counter
from src.storage.usage_repo import UsageRepository

ID = re.compile(r"^[0-9A-Za-z-]{1,64}$")
MAX_PAGE = 100
# The page's own files only: no CDN, no inline script, no framing.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
STATUS_OF_EXIT = {EXIT_ENVIRONMENT: 503, EXIT_INCOMPATIBLE: 409}


class GuardedMixin(RequestHandler):
    """Apply the token rules (src/devtools/web/auth.py) before any handler runs."""

    bearer = False

    @property
    def web(self) -> WebContext:
        context: WebContext = self.application.settings["tgagent"]
        return context

    def set_default_headers(self) -> None:
        for name, value in SECURITY_HEADERS.items():
            self.set_header(name, value)

    def prepare(self) -> None:
        if self._token_in_url():
            return
        self.authorize()

    def check_xsrf_cookie(self) -> None:
        # Tornado checks a POST's _xsrf field before prepare(): the token comes first.
        # A cross-site page cannot send an Authorization header, so bearer clients need no
        # _xsrf; the browser's forms carry it.
        self.authorize()
        if not self.bearer:
            super().check_xsrf_cookie()

    def authorize(self) -> None:
        """Refuse a request that breaks the token rules (401), or a foreign Host (403)."""
        guard = self.web.guard
        if guard.token is None:
            if not is_loopback(host_name(self.request.host)):
                raise HTTPError(403, "the Host header does not name loopback")
            return
        self.bearer = guard.bearer_ok(self.request.headers.get("Authorization"))
        if not (self.bearer or guard.cookie_ok(self.get_cookie(COOKIE))):
            raise HTTPError(401, "missing or wrong token: see `tgagent web` in the README")

    def _token_in_url(self) -> bool:
        """On a GET with the right `?token=`, set the cookie and redirect to the URL
        without it (out of the history and the address bar); tell whether it did."""
        guard = self.web.guard
        given = self.get_query_argument("token", None)
        if self.request.method != "GET" or given is None or not guard.token_ok(given):
            return False
        self.set_cookie(
            COOKIE,
            guard.cookie_value,
            httponly=True,
            samesite="Strict",
            secure=self.request.protocol == "https",
        )
        self.redirect(without_token(self.request.uri or "/"))
        return True

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if status_code == 401:
            self.set_header("WWW-Authenticate", 'Bearer realm="tgagent web"')
        exc = kwargs.get("exc_info", (None, None))[1]
        message = exc.log_message if isinstance(exc, HTTPError) and exc.log_message else ""
        self.render("error.html", status=status_code, message=message or self._reason)


class GuardedHandler(GuardedMixin):
    """A page handler: DevtoolsErrors become a page saying what went wrong."""

    def fail(self, exc: DevtoolsError) -> None:
        """Render a DevtoolsError (an unknown thread, a checkpoint that cannot run...)."""
        self.set_status(STATUS_OF_EXIT.get(exc.code, 404))
        self.render("error.html", status=self.get_status(), message=str(exc))

    def render_page(self, template: str, **values: Any) -> None:
        """Render a template with the helpers every page uses."""
        self.render(template, shorten=shorten, url_encode=urlencode, **values)


class GuardedStatic(GuardedMixin, StaticFileHandler):
    """The page's CSS and JavaScript, behind the same token rules."""


def _text_arg(handler: RequestHandler, name: str) -> str | None:
    value = (handler.get_query_argument(name, "") or "").strip()
    return value or None


def _id_arg(handler: RequestHandler, name: str) -> str | None:
    value = _text_arg(handler, name)
    if value is not None and not ID.match(value):
        raise HTTPError(400, f"{name} must be an id (letters, digits, dashes)")
    return value


def run_filter(handler: RequestHandler) -> RunFilter:
    """Return the runs list's filter from the query string, or refuse a bad value."""
    user, status = _text_arg(handler, "user"), _text_arg(handler, "status")
    if user is not None and not re.fullmatch(r"-?\d{1,19}", user):
        raise HTTPError(400, "user must be a Telegram user or chat id (a number)")
    if status is not None and status not in STATUSES:
        raise HTTPError(400, f"status must be one of {', '.join(STATUSES)}")
    limit = _text_arg(handler, "limit") or "20"
    if not limit.isdigit() or not 1 <= int(limit) <= MAX_PAGE:
        raise HTTPError(400, f"limit must be a number from 1 to {MAX_PAGE}")
    return RunFilter(
        user=None if user is None else int(user),
        thread=_id_arg(handler, "thread"),
        status=status,
        tool=_text_arg(handler, "tool"),
        before=_id_arg(handler, "before"),
        limit=int(limit),
    )


class RunsHandler(GuardedHandler):
    """GET /: the runs, newest first, filtered and paged by the query string."""

    async def get(self) -> None:
        wanted = run_filter(self)
        try:
            page = await find_runs(CheckpointReader(self.web.pool), wanted)
        except DevtoolsError as exc:
            return self.fail(exc)
        tools = sorted({t for names in node_tools(self.web.drawable).values() for t in names})
        self.render_page(
            "runs.html", page=page, wanted=wanted, statuses=STATUSES, tools=tools, args=_args(self)
        )


def _args(handler: RequestHandler) -> dict[str, str]:
    """Return the query's filter arguments (not the cursor), for the paging links."""
    keep = ("user", "thread", "status", "tool", "limit")
    return {k: v for k in keep if (v := handler.get_query_argument(k, "") or "")}


class GraphHandler(GuardedHandler):
    """GET /graph: the graph as tgagent draws it, and its Mermaid source."""

    def get(self) -> None:
        drawable = self.web.drawable
        self.render_page("graph.html", svg=render_svg(drawable), mermaid=drawable.draw_mermaid())


class TurnHandler(GuardedHandler):
    """GET /turn/<thread>/<checkpoint>: the turn holding that checkpoint, node by node."""

    async def get(self, thread: str, checkpoint: str) -> None:
        reader = CheckpointReader(self.web.pool)
        try:
            detail = await turn_detail(reader, thread, checkpoint)
        except DevtoolsError as exc:
            return self.fail(exc)
        settings = self.web.settings
        model = detail["turn"].model or settings.llm_model
        view = turn_view(
            detail, make_counter(model, settings.token_counter), await self._usage(detail)
        )
        self.render_page(
            "turn.html",
            view=view,
            turn=view.turn,
            svg=render_svg(self.web.drawable, view.visited),
            model=detail["turn"].input.get("model") or model,
        )

    async def _usage(self, detail: dict[str, Any]) -> list[dict[str, Any]]:
        turn_id = turn_id_of(detail["turn"])
        if turn_id is None or await missing_tables(self.web.pool, ("llm_calls",)):
            return []
        return await UsageRepository(self.web.pool).turn_calls(turn_id)


class ReplayHandler(GuardedHandler):
    """POST /replay: replay a turn from a checkpoint (a dry run, or kept as a fork)."""

    async def post(self) -> None:
        thread = self.get_body_argument("thread", "")
        checkpoint = self.get_body_argument("checkpoint", "")
        if not (ID.match(thread) and ID.match(checkpoint)):
            raise HTTPError(400, "thread and checkpoint must be ids")
        model = self.get_body_argument("model", "").strip()[:200] or None
        commit = self.get_body_argument("commit", "") == "1"
        if commit and self.get_body_argument("confirmed", "") != "1":
            return self.render_page(
                "confirm.html", thread=thread, checkpoint=checkpoint, model=model or ""
            )
        try:
            outcome = await replay(
                self.web.pool, self.web.settings, thread, checkpoint, model=model, commit=commit
            )
        except DevtoolsError as exc:
            return self.fail(exc)
        self.render_page(
            "replay.html", outcome=outcome, rec=outcome.recorded, asked_model=model or ""
        )
