"""The bot's own texts come in Russian and English: which one a Telegram user gets."""

from __future__ import annotations

# Russian speakers, and users of languages close to it, read the Russian texts.
RUSSIAN_READERS = ("ru", "uk", "be", "kk")


def lang_of(language_code: str | None) -> str:
    """Return `ru` or `en` for a Telegram language code (no code: Russian, as the seeds)."""
    if not language_code:
        return "ru"
    return "ru" if language_code.lower().split("-")[0] in RUSSIAN_READERS else "en"
