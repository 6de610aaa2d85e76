"""Token counting behind one interface: exact with tiktoken when available, else approximate.

The turn path never touches the network: `make_counter` (called once at start) uses
tiktoken only when its encoding file is already on disk and intact, and falls back to
the per-language approximation of seed 002 otherwise.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import os
import re
import tempfile
from collections.abc import Sequence
from typing import Any, Protocol

from langchain_core.messages import BaseMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

logger = logging.getLogger(__name__)

# Role, separators and name cost a few tokens per message in the chat format.
PER_MESSAGE_OVERHEAD = 4

# One match per "piece" a BPE tokenizer would see first: a word of one script, a number,
# a run of punctuation, a line break. Spaces before a word are part of its token.
_PIECES = re.compile(
    r"[A-Za-z]+"  # Latin words
    r"|[\u0400-\u04FF]+"  # Cyrillic words
    r"|\d+"
    r"|[^\W\d_A-Za-z\u0400-\u04FF]+"  # letters of other scripts (CJK, Greek, ...)
    r"|\n+"
    r"|[^\w\s]+|_+"  # punctuation and symbols
)
# Characters per token for one word, from seed 002's words-per-token figures: English
# ~1.33 tokens a word (~5 characters each), Russian ~2 tokens a word (~6 letters each).
_LATIN_CHARS = 5.0
_CYRILLIC_CHARS = 3.0


class TokenCounter(Protocol):
    """Count tokens of a text."""

    name: str

    def count(self, text: str) -> int: ...


class ApproxCounter:
    """Estimate tokens per language, erring high: Latin words ~1.3 tokens, Cyrillic ~2.

    Numbers cost a token per three digits, punctuation a token per two characters, every
    other script a token per character. No file, no network, about 0.1 µs a character.
    """

    name = "approximate"

    def count(self, text: str) -> int:
        return _approx_count(text) if text else 0


# The same history rows and summary are counted on every turn: remember recent texts.
@functools.lru_cache(maxsize=4096)
def _approx_count(text: str) -> int:
    total = 0
    for piece in _PIECES.findall(text):
        first = piece[0]
        if "a" <= first.lower() <= "z":
            total += math.ceil(len(piece) / _LATIN_CHARS)
        elif "\u0400" <= first <= "\u04ff":
            total += math.ceil(len(piece) / _CYRILLIC_CHARS)
        elif first.isdigit():
            total += math.ceil(len(piece) / 3)
        elif first == "\n":
            total += 1
        elif first.isalpha():
            total += len(piece)
        else:
            total += math.ceil(len(piece) / 2)
    # Long runs of spaces (indentation) are tokens too.
    total += text.count("    ") // 2
    return max(1, total)


class TiktokenCounter:
    """Count tokens exactly with a tiktoken encoding."""

    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding
        self.name = f"tiktoken:{encoding.name}"
        self._cached = functools.lru_cache(maxsize=4096)(self._count)

    def _count(self, text: str) -> int:
        return len(self.encoding.encode(text, disallowed_special=()))

    def count(self, text: str) -> int:
        return self._cached(text) if text else 0


def encoding_name(model: str) -> str:
    """Return the tiktoken encoding an OpenAI model uses (cl100k for older and unknown ones)."""
    lowered = model.lower()
    if any(tag in lowered for tag in ("gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4")):
        return "o200k_base"
    return "cl100k_base"


def _cache_dir() -> str:
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    if cache_dir is None:
        cache_dir = os.environ.get("DATA_GYM_CACHE_DIR")
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return cache_dir


def is_cached(name: str) -> bool:
    """Tell whether tiktoken has the encoding on disk and intact, so loading it makes no request.

    Mirrors `tiktoken.load.read_file_cached`: the cache key is the sha1 of the blob URL,
    and a file whose sha256 does not match is thrown away and downloaded again.
    """
    try:
        from tiktoken_ext.openai_public import ENCODING_CONSTRUCTORS
    except ImportError:
        return False
    constructor = ENCODING_CONSTRUCTORS.get(name)
    if constructor is None:
        return False
    consts = [v for v in constructor.__code__.co_consts if isinstance(v, str)]
    urls = [v for v in consts if v.startswith("https://")]
    hashes = {v for v in consts if re.fullmatch(r"[0-9a-f]{64}", v)}
    cache_dir = _cache_dir()
    if not urls or not cache_dir:  # "" disables tiktoken's cache: every load downloads
        return False
    for url in urls:
        path = os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())
        try:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            return False
        if hashes and digest not in hashes:
            return False
    return True


@functools.lru_cache(maxsize=16)
def make_counter(model: str, mode: str = "auto") -> TokenCounter:
    """Return the best counter for `model`, logging once which one is in use.

    `auto` uses tiktoken only when its encoding file is already cached and intact;
    `tiktoken` may download it (once, at start) and falls back if that fails; `approx`
    never uses tiktoken. Counters are cached per (model, mode): the log line appears once.
    """
    counter: TokenCounter = ApproxCounter()
    if mode != "approx":
        name = encoding_name(model)
        if mode == "tiktoken" or is_cached(name):
            try:
                import tiktoken

                counter = TiktokenCounter(tiktoken.get_encoding(name))
            except Exception as exc:  # offline, corrupt cache, missing package
                logger.warning("tiktoken unavailable (%s); counting tokens approximately", exc)
        else:
            logger.info("tiktoken encoding %s not cached; counting tokens approximately", name)
    logger.info("token counter for %s: %s", model, counter.name)
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


def count_tools(tools: Sequence[Any], counter: TokenCounter) -> int:
    """Return the tokens the tools' schemas cost in every request that offers them.

    Counted on the compact form OpenAI renders them in (a description line, then
    `name?: type, // description` per parameter), not on their JSON.
    """
    total = 0
    for tool in tools:
        function = convert_to_openai_tool(tool)["function"]
        params = function.get("parameters") or {}
        required = set(params.get("required") or [])
        head = f"type {function['name']} = (_: {{"
        lines = [f"// {function.get('description', '')}", head]
        for name, spec in (params.get("properties") or {}).items():
            optional = "" if name in required else "?"
            note = f" // {spec['description']}" if spec.get("description") else ""
            lines.append(f"{name}{optional}: {spec.get('type', 'any')},{note}")
        lines.append("}) => any;")
        total += counter.count("\n".join(lines)) + PER_MESSAGE_OVERHEAD
    return total
