"""The bot's own texts come in Russian and English: which one a Telegram user gets."""

from __future__ import annotations

import os
from collections.abc import Mapping

# Russian speakers, and users of languages close to it, read the Russian texts.
RUSSIAN_READERS = ("ru", "uk", "be", "kk")


def lang_of(language_code: str | None) -> str:
    """Return `ru` or `en` for a Telegram language code (no code: Russian, as the seeds)."""
    if not language_code:
        return "ru"
    return "ru" if language_code.lower().split("-")[0] in RUSSIAN_READERS else "en"


def terminal_lang(environ: Mapping[str, str] | None = None) -> str:
    """Return `ru` or `en` for the terminal: the locale's language (LANG), English unless ru."""
    env = os.environ if environ is None else environ
    # POSIX order: LC_ALL overrides LC_MESSAGES, which overrides LANG.
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name)
        if value:
            return "ru" if value.lower().startswith("ru") else "en"
    return "en"
