"""The fake OpenAI server playing local model servers: their context window, where they
say it, and how they refuse a request too long for it.

`FakeOpenAI.window` (tokens; None: no limit) and `FakeOpenAI.flavour` choose the play.
A request's prompt is counted as the real servers count their templated prompt, roughly:
one token per `CHARS_PER_TOKEN` characters of the messages' text and of the tools' JSON.

- "openai": no endpoint says the window; a prompt over it is refused with 400
  `context_length_exceeded`, "This model's maximum context length is W tokens. However,
  your messages resulted in N tokens. ...".
- "llama.cpp" (`llama-server`): `GET /props` says `default_generation_settings.n_ctx`; a
  prompt of the window or more is refused, streamed or not, with 400
  `{"error": {"code": 400, "message": "request (N tokens) exceeds the available context
  size (W tokens), try increasing it", "type": "exceed_context_size_error",
  "n_prompt_tokens": N, "n_ctx": W}}`.
- "llama-cpp-python" (`python -m llama_cpp.server`): says its window nowhere; a prompt of
  the window or more is refused with 400 "This model's maximum context length is W tokens.
  However, you requested T tokens (N in the messages, M in the completion). ..." (code
  `context_length_exceeded`) when not streamed, and with 200 and an empty event stream when
  streamed (its error comes after the headers; only its log says "Requested tokens (N)
  exceed context window of W").
- "vllm": `GET /v1/models` gives the model's `max_model_len`; a prompt plus the reply cap
  (`max_tokens`, else `max_completion_tokens`) over the window is refused with 400
  `{"object": "error", "message": "This model's maximum context length is W tokens.
  However, you requested T tokens (N in the messages, M in the completion). ...",
  "type": "BadRequestError", "param": null, "code": 400}`.
- "ollama": `POST /api/show` gives `model_info` (`llama.context_length`, the model's own)
  and `parameters` with `num_ctx W`, `GET /api/ps` the loaded model's `context_length`; a
  longer prompt is not refused: Ollama cuts its start silently, so the fake answers and
  records the prompt's tokens in `truncated`.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

FLAVOURS = ("openai", "llama.cpp", "llama-cpp-python", "vllm", "ollama")
CHARS_PER_TOKEN = 4
# What the fake Ollama says the model itself was trained for (its `*.context_length`).
OLLAMA_TRAINED = 32768


def prompt_tokens(body: dict[str, Any]) -> int:
    """Return the tokens a server counts in the request's templated prompt, roughly."""
    from tests.fakes.openai_server import message_text

    chars = sum(len(message_text(m)) for m in body.get("messages") or [])
    if body.get("tools"):
        chars += len(json.dumps(body["tools"], ensure_ascii=False))
    return max(1, chars // CHARS_PER_TOKEN)


def reply_cap(body: dict[str, Any]) -> int:
    """Return the reply cap the request asks for (0: none)."""
    return int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)


def overflow(flavour: str, window: int | None, body: dict[str, Any]) -> tuple[Any, ...] | None:
    """Return the fault a `flavour` server answers a request too long for `window` with
    (a fault tuple of FakeOpenAI), or None when it fits (or the server takes it)."""
    if window is None:
        return None
    n = prompt_tokens(body)
    cap = reply_cap(body)
    if flavour == "vllm":
        if n + cap <= window:
            return None
        message = (
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{n + cap} tokens ({n} in the messages, {cap} in the completion). Please reduce "
            "the length of the messages or completion."
        )
        payload = {"object": "error", "message": message, "type": "BadRequestError"}
        return ("status", 400, {**payload, "param": None, "code": 400})
    if flavour == "ollama":
        return None  # it cuts the prompt's start instead (see `truncated`)
    # llama.cpp's servers need a free cell after the prompt; OpenAI counts the prompt only.
    if (n <= window) if flavour == "openai" else (n < window):
        return None
    if flavour == "llama.cpp":
        message = (
            f"request ({n} tokens) exceeds the available context size ({window} tokens), "
            "try increasing it"
        )
        error = {"code": 400, "message": message, "type": "exceed_context_size_error"}
        return ("status", 400, {"error": {**error, "n_prompt_tokens": n, "n_ctx": window}})
    if flavour == "llama-cpp-python":
        if body.get("stream"):
            return ("empty_stream",)
        message = (
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{n + cap} tokens ({n} in the messages, {cap} in the completion). Please reduce "
            "the length of the messages or completion."
        )
    else:
        message = (
            f"This model's maximum context length is {window} tokens. However, your messages "
            f"resulted in {n} tokens. Please reduce the length of the messages."
        )
    error = {"message": message, "type": "invalid_request_error", "param": "messages"}
    return ("status", 400, {"error": {**error, "code": "context_length_exceeded"}})


async def empty_stream(request: web.Request) -> web.StreamResponse:
    """Answer 200 with an event stream that ends before any event."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write_eof()
    return response


def add_routes(app: web.Application, server: Any) -> None:
    """Add the routes where the flavours say their window (404 for the others)."""

    def flavour(*names: str) -> bool:
        return server.flavour in names

    async def props(request: web.Request) -> web.Response:
        if not flavour("llama.cpp"):
            return web.Response(status=404, text="File Not Found")
        n_ctx = server.window or 4096
        settings = {"n_ctx": n_ctx, "n_predict": -1, "temperature": 0.8}
        body = {"default_generation_settings": settings, "total_slots": 1}
        return web.json_response({**body, "model_path": "model.gguf", "chat_template": ""})

    async def show(request: web.Request) -> web.Response:
        if not flavour("ollama"):
            return web.Response(status=404, text="404 page not found")
        model = (await request.json()).get("model")
        if model not in server.models:
            return web.json_response({"error": f"model '{model}' not found"}, status=404)
        parameters = f"num_ctx                        {server.window}" if server.window else ""
        info = {"general.architecture": "llama", "llama.context_length": OLLAMA_TRAINED}
        return web.json_response({"parameters": parameters, "model_info": info})

    async def running(request: web.Request) -> web.Response:
        if not flavour("ollama"):
            return web.Response(status=404, text="404 page not found")
        models = [
            {"name": m, "model": m, "context_length": server.window}
            for m in server.models
            if server.window
        ]
        return web.json_response({"models": models})

    app.router.add_get("/props", props)
    app.router.add_post("/api/show", show)
    app.router.add_get("/api/ps", running)
