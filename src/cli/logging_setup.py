"""Configure logging once, with a filter that keeps secrets out of every record.

A command that talks on the terminal (`tgagent chat`) shows each record on one line,
an exception as its type, status and message: tracebacks only with DEBUG logging.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from pydantic import SecretStr

if TYPE_CHECKING:
    from src.config import Settings

# Bot API URLs carry the token in the path; mask any that slip into a message.
_TOKEN_IN_URL = re.compile(r"/bot\d+:[A-Za-z0-9_-]+")
_FORMATTER = logging.Formatter()
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RedactSecrets(logging.Filter):
    """Replace configured secrets and bot tokens in log records with `***`."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        # Longest first: a secret that contains another is masked whole.
        self.secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)

    def clean(self, text: str) -> str:
        """Return `text` with the secrets and bot tokens masked."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return _TOKEN_IN_URL.sub("/bot***", text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = self.clean(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        # A traceback repeats the exception's text (a DSN, a URL): format it here, once,
        # and leave the formatter the cleaned copy (it reuses `exc_text` when set).
        if record.exc_info and not record.exc_text:
            record.exc_text = _FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.clean(record.exc_text)
        if record.stack_info:
            record.stack_info = self.clean(record.stack_info)
        return True


class OneLineFormatter(logging.Formatter):
    """Format a record as one line: an exception as `describe` words it, no traceback."""

    def __init__(self, redact: RedactSecrets | None = None) -> None:
        super().__init__(FORMAT)
        self.redact = redact

    def format(self, record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        kept = record.exc_info, record.exc_text, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            line = super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = kept
        if exc is not None:
            # Imported on the first exception, not at start: it loads the model libraries.
            from src.graph.memory.errors import describe

            line += f" ({describe(exc)})"
        line = " ".join(line.split())
        return self.redact.clean(line) if self.redact is not None else line


def one_line_logs() -> None:
    """Show every log record on one line, unless DEBUG logging was asked for.

    For the terminal: a failing background call (a memory model answering 500 on every
    turn) is one short line each time, not a screen of traceback.
    """
    root = logging.getLogger()
    if root.getEffectiveLevel() <= logging.DEBUG:
        return
    for handler in root.handlers:
        redact = next((f for f in handler.filters if isinstance(f, RedactSecrets)), None)
        handler.setFormatter(OneLineFormatter(redact))


def secrets_of(settings: Settings) -> list[str]:
    """Return the secret values that must never be logged: every `SecretStr` setting (a
    new one is covered without being listed here), the database password as DSNs
    carry it, and the values of MCP_CONFIG's env and headers."""
    values = [getattr(settings, name) for name in type(settings).model_fields]
    out = [v.get_secret_value() for v in values if isinstance(v, SecretStr)]
    if settings.pg_password is not None:
        # The password as make_conninfo escapes it inside a key=value DSN.
        raw = settings.pg_password.get_secret_value()
        out.append(raw.replace("\\", "\\\\").replace("'", "\\'"))
    if settings.pg_password is None and settings.database_url is not None:
        from urllib.parse import urlsplit

        password = urlsplit(settings.database_url.get_secret_value()).password
        if password:
            out.append(password)
    if settings.mcp_config is not None:
        from src.graph.mcp.config import secrets_in

        out += secrets_in(settings.mcp_config)  # what MCP servers' env and headers hold
    return out


def configure_logging(level: str, settings: Settings) -> None:
    """Set up root logging with secret redaction on every handler."""
    logging.basicConfig(
        level=level.upper(),
        format=FORMAT,
        force=True,
    )
    redact = RedactSecrets(secrets_of(settings))
    for handler in logging.getLogger().handlers:
        handler.addFilter(redact)
    # httpx logs every request URL at INFO, and Bot API URLs contain the token.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    # The embedded server logs initdb's whole output at INFO: only for debugging.
    debugging = logging.getLogger().level <= logging.DEBUG
    logging.getLogger("pgserver").setLevel(logging.DEBUG if debugging else logging.WARNING)
