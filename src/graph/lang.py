"""The bot's own texts come in Russian and English: which one a Telegram user gets."""

from __future__ import annotations

import os
from collections.abc import Mapping


def lang_of(language_code: str | None) -> str:
    """Return `ru` for Russian (and no code, as the seeds), `en` for every other language."""
    if not language_code:
        return "ru"
    return "ru" if language_code.lower().split("-")[0] == "ru" else "en"


def terminal_lang(environ: Mapping[str, str] | None = None) -> str:
    """Return `ru` or `en` for the terminal: the locale's language (LANG), English unless ru."""
    env = os.environ if environ is None else environ
    # POSIX order: LC_ALL overrides LC_MESSAGES, which overrides LANG.
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name)
        if value:
            return "ru" if value.lower().startswith("ru") else "en"
    return "en"
