"""Who may use the web page: loopback without a token, anywhere else only with WEB_TOKEN.

With a token, every request carries it: `Authorization: Bearer <token>` (scripts), or a
cookie a browser got by opening a URL with `?token=<token>` once. The cookie holds an
HMAC of the token, not the token, and is HttpOnly and SameSite=Strict. Comparisons are
constant-time. Without a token (loopback only) the Host header must name loopback, so a
page elsewhere cannot reach the server through DNS rebinding.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from src.devtools.common import EXIT_ENVIRONMENT, DevtoolsError

COOKIE = "tgagent_web"
LOOPBACK_NAMES = ("localhost",)
NEEDS_TOKEN = (
    "`tgagent web --host {host}` listens beyond loopback: set WEB_TOKEN (a long random "
    "string, e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`) so "
    "that every request must carry it, or keep the default --host 127.0.0.1"
)


def is_loopback(host: str) -> bool:
    """Tell whether `host` (a name or an address, IPv6 possibly bracketed) is loopback."""
    bare = host.strip("[]").lower()
    if bare in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """Return the host of a Host header, without the port."""
    return urlsplit(f"//{header}").hostname or ""


def without_token(uri: str) -> str:
    """Return a request URI with any `token` query parameter removed."""
    parts = urlsplit(uri)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "token"]
    return urlunsplit(("", "", parts.path, urlencode(query), parts.fragment))


@dataclass(frozen=True)
class Guard:
    """The token rules of one server: `token` None means loopback-only, no token."""

    token: str | None

    @classmethod
    def for_host(cls, host: str, token: str | None) -> Guard:
        """Return the guard for listening on `host`; refuse beyond loopback without a token."""
        if not token and not is_loopback(host):
            raise DevtoolsError(NEEDS_TOKEN.format(host=host), EXIT_ENVIRONMENT)
        return cls(token or None)

    @property
    def cookie_value(self) -> str:
        """Return what the browser's cookie holds: an HMAC of the token, not the token."""
        key = (self.token or "").encode()
        return hmac.new(key, b"tgagent web cookie", hashlib.sha256).hexdigest()

    def bearer_ok(self, authorization: str | None) -> bool:
        """Tell whether an Authorization header carries the token."""
        scheme, _, given = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and self.token_ok(given.strip())

    def token_ok(self, given: str | None) -> bool:
        """Tell whether `given` is the token (constant-time)."""
        return self.token is not None and hmac.compare_digest(
            (given or "").encode(), self.token.encode()
        )

    def cookie_ok(self, given: str | None) -> bool:
        """Tell whether a cookie value is the one `cookie_value` sets (constant-time)."""
        return self.token is not None and hmac.compare_digest(
            (given or "").encode(), self.cookie_value.encode()
        )
