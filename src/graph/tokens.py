"""Token counting behind one interface: exact with tiktoken when available, else approximate."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Sequence
from typing import Any, Protocol

from langchain_core.messages import BaseMessage

logger = logging.getLogger(__name__)

# Role, separators and name cost a few tokens per message in the chat format.
PER_MESSAGE_OVERHEAD = 4


class TokenCounter(Protocol):
    """Count tokens of a text."""

    name: str

    def count(self, text: str) -> int: ...


class ApproxCounter:
    """Estimate tokens from characters: Latin ~4 chars a token, Cyrillic and others ~2."""

    name = "approximate"

    def count(self, text: str) -> int:
        if not text:
            return 0
        ascii_chars = sum(1 for ch in text if ord(ch) < 128)
        other = len(text) - ascii_chars
        return max(1, round(ascii_chars / 4 + other / 2))


class TiktokenCounter:
    """Count tokens exactly with a tiktoken encoding."""

    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding
        self.name = f"tiktoken:{encoding.name}"

    def count(self, text: str) -> int:
        return len(self.encoding.encode(text, disallowed_special=()))


def _encoding_name(model: str) -> str:
    lowered = model.lower()
    if any(tag in lowered for tag in ("gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4")):
        return "o200k_base"
    return "cl100k_base"


def _is_cached(encoding_name: str) -> bool:
    """Tell whether tiktoken has the encoding on disk, so loading it makes no request."""
    try:
        from tiktoken_ext.openai_public import ENCODING_CONSTRUCTORS
    except ImportError:
        return False
    constructor = ENCODING_CONSTRUCTORS.get(encoding_name)
    if constructor is None:
        return False
    # Mirror tiktoken.load.read_file_cached: the cache key is the sha1 of the blob URL.
    urls = [
        v for v in constructor.__code__.co_consts if isinstance(v, str) and v.startswith("https://")
    ]
    if not urls:
        return False
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return all(
        os.path.exists(os.path.join(cache_dir, hashlib.sha1(u.encode()).hexdigest()))
        for u in urls
        if u.endswith((".tiktoken", ".bpe", ".json"))
    )


def make_counter(model: str, mode: str = "auto") -> TokenCounter:
    """Return the best counter for `model` without touching the network unless asked.

    `auto` uses tiktoken only when its encoding file is already cached; `tiktoken` may
    download it (and falls back if that fails); `approx` never uses tiktoken.
    """
    counter: TokenCounter = ApproxCounter()
    if mode != "approx":
        name = _encoding_name(model)
        if mode == "tiktoken" or _is_cached(name):
            try:
                import tiktoken

                counter = TiktokenCounter(tiktoken.get_encoding(name))
            except Exception as exc:  # offline, corrupt cache, missing package
                logger.warning("tiktoken unavailable (%s); counting tokens approximately", exc)
        else:
            logger.info("tiktoken encoding %s not cached; counting tokens approximately", name)
    logger.info("token counter in use: %s", counter.name)
    return counter


def message_text(message: BaseMessage) -> str:
    """Return a message's text, tool calls included, as the model would read it."""
    text = message.text if isinstance(message.content, list) else str(message.content)
    calls = getattr(message, "tool_calls", None)
    if calls:
        text += "".join(f"{c['name']}({c.get('args')})" for c in calls)
    return text


def count_messages(messages: Sequence[BaseMessage], counter: TokenCounter) -> int:
    """Return the tokens a list of chat messages costs, overhead included."""
    return sum(counter.count(message_text(m)) + PER_MESSAGE_OVERHEAD for m in messages)
