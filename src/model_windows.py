"""The context windows of the models an endpoint serves: what the server said, remembered.

A window is found by asking the server (src/services/window_probe.py) or learned from the
first request the server refused as too long for it (`window_of_error`), and kept per
endpoint and model in a small JSON file in the data directory, so a restart knows it.
Only the standard library here: `Settings.context_limit` reads it, and `tgagent chat`
says it before anything heavy is imported.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

FILE_NAME = "model_windows.json"
# A window the server refused a request planned within: our token count is below the
# server's (another tokenizer); requests are planned on less of it, never below FLOOR.
SHRINK = 0.85
FLOOR = 0.5
# Where an overflow error says the window (the wordings of OpenAI, vLLM and
# llama-cpp-python's server; llama-cpp-python itself; llama.cpp's server; LM Studio).
_WINDOW_SAID = (
    re.compile(r"maximum context length is (\d+)", re.I),
    re.compile(r"exceed context window of (\d+)", re.I),
    re.compile(r"available context size \((\d+) tokens?\)", re.I),
    re.compile(r"['\"]n_ctx['\"]\s*:\s*(\d+)"),
    re.compile(r"context length of only (\d+) tokens", re.I),
)
# Wordings of an overflow that may not say the window (older llama.cpp, Ollama).
_OVERFLOW_SAID = re.compile(
    r"context_length_exceeded|exceed_context_size|exceeds? the available context size"
    r"|maximum context length|exceed context window|exceeds the context length"
    r"|prompt too long|context length of only|context window full",
    re.I,
)
# What langchain raises for a 200 stream with no chunk at all: llama-cpp-python's server
# answers a streamed request too long for its window so (its error comes after the headers).
EMPTY_STREAM = "No generation chunks were returned"


@dataclass(frozen=True)
class Window:
    """A model's context window on one endpoint, and where it came from."""

    tokens: int
    """The window the server has, in tokens."""
    source: str
    """Where it came from: "props" (llama.cpp), "models" (vLLM), "ollama", "lmstudio",
    "error" (a refused request said it), "setting", "default"."""
    usable: int = 0
    """What a request is planned within (0: `tokens`): less when the server refused a
    request planned within `tokens` (its tokenizer counts more than ours)."""

    @property
    def planned(self) -> int:
        """Return the tokens a request is planned within."""
        return self.usable or self.tokens


def endpoint_key(base_url: str | None, model: str) -> str:
    """Return the book's key of `model` on the endpoint `base_url` (None: OpenAI's)."""
    return f"{(base_url or 'https://api.openai.com/v1').rstrip('/')} {model}"


def window_of_error(exc: BaseException | str) -> int | None:
    """Return the window an overflow error says, or None when it says none."""
    text = exc if isinstance(exc, str) else f"{exc} {getattr(exc, 'body', '') or ''}"
    for pattern in _WINDOW_SAID:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return None


def is_overflow(exc: BaseException) -> bool:
    """Tell whether a model error refuses a request as too long for the model's window:
    a 400 (or 413) saying so in any server's wording."""
    status = getattr(exc, "status_code", None)
    if status not in (400, 413):
        return False
    text = f"{exc} {getattr(exc, 'body', '') or ''}"
    return bool(_OVERFLOW_SAID.search(text))


class WindowBook:
    """The windows known per endpoint and model; saved to `path` (None: kept in memory)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._windows: dict[str, Window] = {}
        if path is not None:
            self._windows = _read(path)

    @classmethod
    def in_dir(cls, data_dir: Path) -> WindowBook:
        """Return the book saved in the data directory."""
        return cls(data_dir / FILE_NAME)

    def get(self, base_url: str | None, model: str) -> Window | None:
        """Return the window known for `model` on `base_url`, if any."""
        with self._lock:
            return self._windows.get(endpoint_key(base_url, model))

    def put(self, base_url: str | None, model: str, window: Window) -> None:
        """Remember the window a server told (its probe answered)."""
        with self._lock:
            self._windows[endpoint_key(base_url, model)] = window
            self._save()

    def learn(self, base_url: str | None, model: str, tokens: int) -> Window:
        """Remember the window an overflow error said (`tokens`) and return it (what a
        request is planned within stays, when the window is the one known)."""
        key = endpoint_key(base_url, model)
        with self._lock:
            known = self._windows.get(key)
            usable = known.usable if known is not None and known.tokens == tokens else 0
            window = Window(tokens, "error", usable)
            self._windows[key] = window
            self._save()
        logger.warning(
            "the server of %s refused a request as too long: its window is %d tokens",
            model,
            tokens,
        )
        return window

    def plan_within(self, base_url: str | None, model: str, usable: int) -> None:
        """Plan requests to `model` within `usable` tokens of its known window (the
        server counts more than we do), never less than FLOOR of it."""
        key = endpoint_key(base_url, model)
        with self._lock:
            known = self._windows.get(key)
            if known is None:
                return
            usable = max(int(known.tokens * FLOOR), min(usable, known.planned))
            self._windows[key] = Window(known.tokens, known.source, usable)
            self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            data = {key: asdict(window) for key, window in self._windows.items()}
            temporary.write_text(json.dumps(data, indent=1), encoding="utf-8")
            temporary.replace(self.path)  # whole or not at all, for other processes
        except OSError as exc:
            logger.warning("could not save the models' windows in %s: %s", self.path, exc)


def _read(path: Path) -> dict[str, Window]:
    """Return the windows saved in `path` ({} when none or unreadable)."""
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        logger.warning("ignoring the models' windows in %s: %s", path, exc)
        return {}
    windows: dict[str, Window] = {}
    for key, value in raw.items() if isinstance(raw, dict) else ():
        try:
            windows[str(key)] = Window(
                int(value["tokens"]), str(value["source"]), int(value.get("usable") or 0)
            )
        except (KeyError, TypeError, ValueError):
            continue
    return windows
