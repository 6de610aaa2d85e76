"""Ask a model server how large its model's context window is.

Each kind of server says it somewhere else: llama.cpp's `GET /props`
(`default_generation_settings.n_ctx`: the window of one slot), vLLM's `GET /v1/models`
(`max_model_len` on the model's entry), Ollama's `POST /api/ps` and `POST /api/show` (the
loaded model's `context_length`, else the model's `num_ctx` parameter, else Ollama's
default capped by the model's own `*.context_length`), LM Studio's `GET /api/v0/models`
(`loaded_context_length`, else `max_context_length`). llama-cpp-python's server says it
nowhere: its window is learned from the first request it refuses
(src/model_windows.py). Short timeouts; a server that answers none of these is no error.
The standard library's client, as for finding a local server (src/services/local_model.py):
`tgagent chat` asks before its first prompt, and httpx would cost that prompt a tenth of a
second of imports.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from src.model_windows import Window

if TYPE_CHECKING:
    from src.config import Settings
    from src.services.local_model import LocalServer

logger = logging.getLogger(__name__)

PROBE_SECONDS = 1.0
# Ollama's window when neither the loaded model nor its parameters say one (its default
# since 0.6; OLLAMA_CONTEXT_LENGTH changes it): never more than the model's own.
OLLAMA_DEFAULT = 4096
# LM Studio loads a model with this window unless told otherwise.
LMSTUDIO_DEFAULT = 4096
_NUM_CTX = re.compile(r"^num_ctx\s+(\d+)\s*$", re.M)


def server_root(base_url: str) -> str:
    """Return the server's root URL: the base URL without its `/v1`."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def skips(base_url: str | None) -> bool:
    """Tell whether `base_url` is one no probe is sent to: OpenAI's own API, whose
    models' windows no endpoint says (a setting or the first refusal does)."""
    host = urlsplit(base_url or "https://api.openai.com/v1").hostname or ""
    return host == "api.openai.com"


def probe(
    base_url: str | None, model: str, api_key: str | None = None, timeout: float = PROBE_SECONDS
) -> Window | None:
    """Return the window the server at `base_url` says `model` has, or None."""
    if base_url is None or skips(base_url):
        return None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def ask(url: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        sent = {**headers, "Content-Type": "application/json"} if data else headers
        request = urllib.request.Request(url, data=data, headers=sent)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    for read in (_vllm, _llama_cpp, _ollama, _lmstudio):
        try:
            found = read(ask, base_url, model)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            # refused, timed out, 404, not JSON, not the expected shape
            logger.debug("%s of %s: %s", read.__name__, base_url, exc)
            continue
        if found is not None and found.tokens > 0:
            return found
    return None


Ask = Callable[..., Any]
"""GET (or, with a body, POST) a URL of the server and return its JSON."""


def _vllm(ask: Ask, base_url: str, model: str) -> Window | None:
    """vLLM: `max_model_len` on the model's entry of /v1/models."""
    body = ask(base_url.rstrip("/") + "/models")
    for entry in body.get("data") or []:
        if isinstance(entry, dict) and entry.get("id") == model and entry.get("max_model_len"):
            return Window(int(entry["max_model_len"]), "models")
    return None


def _llama_cpp(ask: Ask, base_url: str, model: str) -> Window | None:
    """llama.cpp's server: the slot's `n_ctx` in /props (not the model's `n_ctx_train`)."""
    body = ask(server_root(base_url) + "/props")
    settings = body.get("default_generation_settings") or {}
    n_ctx = settings.get("n_ctx") or body.get("n_ctx")
    return Window(int(n_ctx), "props") if n_ctx else None


def _ollama(ask: Ask, base_url: str, model: str) -> Window | None:
    """Ollama: the loaded model's window (/api/ps), else its `num_ctx` (/api/show), else
    Ollama's default within the model's own context length."""
    root = server_root(base_url)
    shown = ask(root + "/api/show", {"model": model})
    if not isinstance(shown, dict) or "model_info" not in shown:
        return None
    try:
        running = ask(root + "/api/ps").get("models") or []
    except (OSError, ValueError):
        running = []
    for entry in running:
        if entry.get("name") == model or entry.get("model") == model:
            if entry.get("context_length"):
                return Window(int(entry["context_length"]), "ollama")
    said = _NUM_CTX.search(str(shown.get("parameters") or ""))
    if said:
        return Window(int(said.group(1)), "ollama")
    info = shown.get("model_info") or {}
    own = [int(v) for k, v in info.items() if k.endswith(".context_length") and v]
    return Window(min([OLLAMA_DEFAULT, *own]), "ollama")


def _lmstudio(ask: Ask, base_url: str, model: str) -> Window | None:
    """LM Studio: the loaded model's `loaded_context_length` in /api/v0/models."""
    body = ask(server_root(base_url) + "/api/v0/models")
    for entry in body.get("data") or []:
        if not isinstance(entry, dict) or entry.get("id") != model:
            continue
        if entry.get("loaded_context_length"):
            return Window(int(entry["loaded_context_length"]), "lmstudio")
        if entry.get("max_context_length"):
            return Window(min(LMSTUDIO_DEFAULT, int(entry["max_context_length"])), "lmstudio")
    return None


def ask_windows(settings: Settings) -> Window:
    """Give `settings` the book of known windows (from the data directory) and ask the
    server the windows of LLM_MODEL and the memory model, unless a setting says them;
    return LLM_MODEL's window. Blocking: run it in a thread from async code."""
    from src.model_windows import WindowBook

    book = settings.windows
    if book is None:
        book = WindowBook.in_dir(settings.tgagent_data_dir)
        settings.use_windows(book)
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    for model in dict.fromkeys([settings.llm_model, settings.effective_summary_model]):
        if settings.window(model).source == "setting":
            continue
        found = probe(settings.openai_base_url, model, key)
        if found is not None:
            book.put(settings.openai_base_url, model, found)
    return settings.window(settings.llm_model)


def model_line(
    settings: Settings, window: Window, lang: str | None, found: LocalServer | None = None
) -> str:
    """Return the line `tgagent chat` starts with: the model, its endpoint (`found`: the
    local server it found by itself), its window and where the window came from."""
    from src.services.texts import t

    url = settings.openai_base_url or "https://api.openai.com/v1"
    source = t(f"window_source_{window.source}", lang)
    values = {"model": settings.llm_model, "url": url, "window": window.tokens}
    if found is None:
        return t("chat_model_line", lang, **values, source=source)
    line = t("chat_local_model", lang, model=found.model, name=found.name, url=found.base_url)
    return f"{line} {t('chat_window', lang, window=window.tokens, source=source)}"
