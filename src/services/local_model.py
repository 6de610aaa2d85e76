"""Find a local OpenAI-compatible server (Ollama, llama.cpp) when no endpoint is configured."""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass

logger = logging.getLogger(__name__)

# Where these servers listen by default, as base URLs for the OpenAI client.
CANDIDATES: tuple[tuple[str, str], ...] = (
    ("Ollama", "http://127.0.0.1:11434/v1"),
    ("llama.cpp", "http://127.0.0.1:8080/v1"),
)
# Internal, for tests: comma-separated base URLs that replace CANDIDATES.
CANDIDATES_ENV = "TGAGENT_LOCAL_MODEL_URLS"


@dataclass(frozen=True)
class LocalServer:
    """A local server that answered `GET /models`, and the model chosen on it."""

    name: str
    base_url: str
    model: str


def candidates() -> tuple[tuple[str, str], ...]:
    """Return the (name, base URL) pairs to try, in order."""
    override = os.environ.get(CANDIDATES_ENV)
    if override is None:
        return CANDIDATES
    return tuple(("local server", url.strip()) for url in override.split(",") if url.strip())


def list_models(base_url: str, timeout: float = 0.5) -> list[str] | None:
    """Return the model ids a server at `base_url` lists, or None when nothing answers."""
    request = urllib.request.Request(base_url.rstrip("/") + "/models")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = json.loads(response.read())
    except (OSError, ValueError) as exc:  # refused, timed out, not JSON, not HTTP
        logger.debug("no model server at %s: %s", base_url, exc)
        return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id")]


def choose_model(models: list[str], preferred: str) -> str | None:
    """Return `preferred` when served, else the first chat model listed."""
    if preferred in models:
        return preferred
    # Ollama lists its embedding models too; they cannot chat.
    chat = [m for m in models if "embed" not in m.lower()]
    return chat[0] if chat else None


def discover(preferred: str, timeout: float = 0.5) -> LocalServer | None:
    """Return the first local server that serves a chat model, or None."""
    for name, base_url in candidates():
        models = list_models(base_url, timeout)
        model = choose_model(models, preferred) if models else None
        if model is not None:
            return LocalServer(name, base_url, model)
    return None
