"""The bot's own texts come in Russian and English: which one a Telegram user gets.

One rule (docs/telegram.md, "What users get"): a Russian language code gets Russian, any
other code English, and no code at all (a client that sends none) `DEFAULT_LANGUAGE`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

LANGUAGES = ("ru", "en")
_default = "ru"  # DEFAULT_LANGUAGE; the seeds' users speak Russian


def set_default_language(language: str) -> None:
    """Make `language` (`ru` or `en`) what users whose update carries no language code get.

    Set once from the settings (DEFAULT_LANGUAGE) when the runtime is built; a process
    serves one configuration, and the language of a text is decided in code far from it
    (the graph's prompts, the services' texts).
    """
    global _default
    if language not in LANGUAGES:
        raise ValueError(f"DEFAULT_LANGUAGE must be one of {LANGUAGES}, not {language!r}")
    _default = language


def lang_of(language_code: str | None) -> str:
    """Return `ru` for Russian, `en` for every other language, DEFAULT_LANGUAGE for no code.

    Takes an IETF tag as Telegram sends it (`ru`, `en-GB`, `pt-br`) or a POSIX locale's
    language (`ru_RU.UTF-8`).
    """
    if not language_code:
        return _default
    return "ru" if re.split(r"[-_.@]", language_code.lower())[0] == "ru" else "en"


def terminal_lang(environ: Mapping[str, str] | None = None) -> str:
    """Return `ru` or `en` for the terminal, from the locale (English for no locale: that
    is the C locale)."""
    env = os.environ if environ is None else environ
    # POSIX order: LC_ALL overrides LC_MESSAGES, which overrides LANG.
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name)
        if value:
            return lang_of(value)
    return lang_of("C")
