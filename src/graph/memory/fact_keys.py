"""Fact keys: one name per thing, whoever names it (the extractor, a tool, the user).

A key is `snake_case` in any script, without the words that only say the fact is about
the user (`user_name` and `name` are one key). Two keys whose words match but for a
plural `s` are one thing: a new fact takes the known key, so its value replaces the
old one instead of piling up under a new name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_NOT_KEY = re.compile(r"[^\w]+")
_POSSESSIVE = re.compile(r"['’]s\b")
# Words that only say the fact is about the user: `user_name` and `name` are one key.
_OWNER_WORDS = frozenset(
    {"user", "users", "the", "my", "his", "her", "their", "пользователь", "пользователя", "мой"}
)


def normalize_key(key: Any) -> str:
    """Return a fact key as `snake_case` (any script) without owner words, at most 64 chars."""
    text = _POSSESSIVE.sub("", str(key).strip().lower())
    words = [w for w in _NOT_KEY.sub("_", text).split("_") if w]
    kept = [w for w in words if w not in _OWNER_WORDS] or words
    return "_".join(kept)[:64]


def key_signature(key: str) -> str:
    """Return what two keys for the same thing share: words without plural `s`, in order."""
    return "".join(w[:-1] if len(w) > 3 and w.endswith("s") else w for w in key.split("_"))


def reuse_known_keys(facts: list[dict[str, Any]], known: Sequence[str]) -> list[dict[str, Any]]:
    """Give each fact the known key of the same signature, so its value is replaced."""
    by_signature = {key_signature(k): k for k in known}
    for fact in facts:
        fact["key"] = by_signature.get(key_signature(fact["key"]), fact["key"])
    return facts


def find_key(wanted: str, known: Sequence[str]) -> str | None:
    """Return the known key a user or a model means by `wanted` ("City", "my cities"),
    or None."""
    key = normalize_key(wanted)
    if not key:
        return None
    if key in known:
        return key
    signature = key_signature(key)
    return next((k for k in known if key_signature(k) == signature), None)
