"""A scripted OpenAI-compatible chat, embeddings and transcription server for tests and benchmarks.

The server runs aiohttp in its own thread and event loop on 127.0.0.1, so it serves
sync tests, async tests on any loop, and subprocesses alike. Replies are scripted
(`script`, `script_for`) or fall back to `default_reply`; every request body is recorded.

Fault semantics: an injected fault (`fail_next`, `malformed_next`, `empty_next`,
`close_connection_next`) answers one request each, in the order injected, and does NOT
consume a scripted reply, so a client's retry gets the reply that was meant for it.
`empty_next` answers 200 with one choice whose content is "" (mode="content", the default)
or with `choices: []` (mode="choices").

Scripted faults: a `Fault` used as a reply (queued with `script`/`script_for`, set as
`default_reply`, or returned by a sync or async callable reply) is answered exactly like
the matching injected fault (`Fault(500)` like `fail_next`, `Fault(kind="close")` like
`close_connection_next`, `Fault(kind="malformed")` like `malformed_next`), but it DOES
consume its scripted slot. So `script_for("m", Fault(500), Fault(500), "ok")` fails the
first two requests for model "m" only, and the third gets "ok". Injected faults are
answered before scripted replies are looked at.

Structured output: `response_format` is validated the way OpenAI validates it: an object
whose `type` is "text", "json_object" or "json_schema"; "json_object" needs the word
"json" somewhere in the messages; "json_schema" needs a `json_schema` object with a valid
`name` and a `schema` object, and with `strict: true` every object in the schema must set
`"additionalProperties": false` and list all its properties in `required`, with an object
at the root. With `supports_structured_output = False` the server answers "json_schema"
like an older self-hosted OpenAI-compatible server: 400 "not supported". The reply content
is still whatever is scripted. A rejected request is answered 400 at once and recorded,
but consumes no injected fault, delay or scripted reply, so a client's fallback request
gets the reply that was meant for it. `structured_output_mode` says which types the server
knows beyond that validation: "json_schema" (the default: all three), "json_object" (like
llama-cpp-python, whose request model allows 'text' and 'json_object' only: a "json_schema"
request is answered 500 with its pydantic validation error, `{"error": {"message":
"[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input
should be 'text' or 'json_object'\", ...}]", "type": "internal_server_error", ...}}`), or
"text" (the same 500, "Input should be 'text'", for "json_object" and "json_schema"). Such
a refusal is recorded and consumes nothing either, like a rejected `response_format`.

Finish reasons: a scripted dict reply may say its `finish_reason`, "stop", "length",
"tool_calls" or "content_filter" (anything else is a TypeError). `{"content": "", "finish_reason":
"content_filter"}` answers like Azure OpenAI's output filter: 200, that finish reason, the
content empty (or, given some, the part written before the filter stopped it), `refusal` null,
in a stream as in a whole answer. `{"content": None, "refusal": "I can't help with that."}`
answers like a model refusing under Structured Outputs: `content` null, the `refusal` text
(in a stream, one `refusal` delta), `finish_reason` "stop".

Output caps: `max_completion_tokens` and `max_tokens` (a positive integer, else 400) are
honoured like the real servers: the reply is cut to the cap, counting one token per
`CHARS_PER_TOKEN` (4) characters of content as `usage` does, and answered with
`finish_reason: "length"`; tool calls that do not fit whole after the content are dropped.
`max_completion_tokens` wins when both are sent. With `honours_max_completion_tokens = False`
the server acts like llama.cpp's server and other OpenAI-compatible servers that only know
`max_tokens`: it ignores `max_completion_tokens`, so a long scripted reply comes back whole.

Message protocol: the chat request is validated as OpenAI validates it, and rejected with 400
`invalid_request_error` naming the `param`: `messages` a non-empty array of objects; every
`role` one of system, developer, user, assistant, tool; content present (an assistant
message may omit it when it has `tool_calls`); every `tool_calls` entry with an `id`, type
"function" and a function `name`; every `tool` message answers, by `tool_call_id`, a tool
call of the assistant message before it (only tool messages in between); every tool call
answered by tool messages before the next non-tool message; `tool_choice` only with
`tools`. OpenAI does not require `tools` when the history holds tool calls, and neither does
the fake. A request rejected here is recorded like a rejected `response_format`.

Streaming: a request with `stream: true` is answered as server-sent events: a role chunk,
the content in chunks of 16 characters (or, with `stream_words = True`, one word with the
whitespace after it per chunk), the tool calls, the finish chunk, the usage chunk when
`stream_options.include_usage` asks for it, and `[DONE]`. The first content chunk goes out
right after the request's delay (`delay`/`delay_next`: the time to first token), then one
every `stream_delay` seconds. A client that goes away before the answer is complete (it
cancelled the call) is counted in `cancelled_streams` and leaves nothing in flight.

One-slot servers: with `slots = n` (0, the default: any number) the chat requests are
served n at a time, like llama.cpp's server with `--parallel n` (llama-cpp-python serves
one): the others wait, in the order they came, before anything of theirs is answered
(delay and faults included). `served` lists the requests' indexes (in `requests`) in
the order they got a slot. `token_seconds` is the time the server takes per output token
(one per `CHARS_PER_TOKEN` characters): a whole answer comes after its content's time, a
streamed one writes each chunk after its tokens' time (or `stream_delay`, the longer).

Usage: every chat answer reports `usage` (`prompt_tokens`: one token per `CHARS_PER_TOKEN`
characters of the messages' text, at least 1; `completion_tokens`: likewise of the reply's
content and tool calls), a stream in its usage chunk. `cached_prompt_tokens = n` adds
`prompt_tokens_details: {"cached_tokens": min(n, prompt_tokens)}` as OpenAI's prompt
caching does; `reports_usage = False` answers like servers that report none (no `usage`
field, and no usage chunk in a stream even when asked for).

Timing: every recorded chat request also gets a record in `request_times` (at the same index
as its body in `requests`): `arrived`, the `time.time()` at which the request came, and
`first_content`, when its first non-empty content went out (a stream's first content chunk,
else the whole answer), or None when none did (a fault, a rejection, tool calls only, a client
gone first). The handler also keeps the record as `request[TIMING]`, for subclasses.

Embeddings: `POST /v1/embeddings` (and `/embeddings`) answers like OpenAI, as
`{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": ...}],
"model": ..., "usage": {"prompt_tokens": n, "total_tokens": n}}` with one item per input,
each a list of floats (`encoding_format` "float") or, when asked for "base64" (what the
`openai` SDK sends by default), base64 of little-endian float32. The request is validated
like OpenAI and rejected with 400 `invalid_request_error` naming the `param`: the body must
be an object; `model` a string; `input` a non-empty string, or a non-empty array of at most
`MAX_EMBEDDING_INPUTS` (2048) inputs that are all non-empty strings, or all integers (one
tokenized input), or all non-empty integer arrays (tokenized inputs); an empty string or
array is "'$.input' is invalid. ..."; `encoding_format` "float" or "base64"; `dimensions`
an integer from 1 to `embedding_dims`; an input of more than `embedding_max_tokens` (8192)
tokens (words here) is refused with 400 "This model's maximum context length is ...".
A model not in `embedding_models` is answered 404
`model_not_found`. Vectors are `fake_embedding(text, dims, embedding_synonyms)`, with `dims`
the request's `dimensions` or else `embedding_dims` (64): the lower-cased text is split into
words (`\\w+`), each word is mapped through `embedding_synonyms` (keys matched lower-cased,
so a test can declare that "медсестра" means "nurse"), cut to its first 5 characters (a
crude stem) and hashed with `zlib.crc32` to a dimension that gets +1.0; the sum is
L2-normalized, and a text without words gets the unit vector on dimension 0. So texts
sharing stems are similar and texts with the same stems are equal. A token-id input is
embedded as the words `str(n)` of its integers. `usage` counts one token per word or token
id, at least one per input.

Embedding faults are separate from the chat ones, in both directions: `fail_embeddings_next`
answers the next n valid embedding requests with an HTTP error (an OpenAI-style error, or
`body` as with `fail_next`), `delay_embeddings_next`
sleeps before answering them, and `embeddings_down = True` answers every embedding request
with 503, before validation, until it is reset. Every embedding request body is recorded in
`embedding_requests`, rejected ones too (a body that is not JSON as its text); a rejected or
"down" request consumes no embedding fault or delay. `clear()` forgets the recorded
embedding requests and pending faults and delays; `reset()` also restores `embeddings_down`,
`embedding_synonyms`, `embedding_dims`, `embedding_max_tokens` and `embedding_models`.

Content parts and images: a message's content may be an array of parts, checked as OpenAI
does: a non-empty array of objects whose `type` is "text" (with a string `text`) or
"image_url" (with an `image_url` object holding a string `url` and an optional `detail` of
auto, low or high); the fake knows no other part types. Image parts are allowed in `user`
messages only (else 400 "Invalid 'messages[i]'. Image URLs are only allowed for messages
with role 'user', ..."), and for a model in `vision_models` only (else 400 "Invalid content
type. image_url is only supported by certain models."; by default every listed model whose
name holds "gpt-4o" or "gpt-4.1", and "fake-vision"; settable). An http(s) URL is taken
as is (not fetched); a `data:image/<png|jpeg|gif|webp>;base64,...` URL must decode as
base64 (else "Invalid base64 image_url.") to a whole image of that kind (else "You uploaded
an unsupported image. Please make sure your image is valid."); another MIME type is "You
uploaded an unsupported image. Please make sure your image has of one the following
formats: [...]" and a URL that is neither is "Invalid image URL: ...". Every image of an
accepted request is recorded in `images_seen` as {"model", "url", "mime_type", "width",
"height", "size"} (an http image: url only). A refused request is recorded and consumes
nothing, like a rejected `response_format`. `message_text` reads only the text parts.

Transcriptions: `POST /v1/audio/transcriptions` (and `/audio/transcriptions`) takes the
multipart form the `openai` client sends: `file`, `model`, and optional `language`,
`prompt`, `response_format` (json, the default, text, verbose_json, srt or vtt; the
"*-transcribe" models only json and text) and `temperature` (0 to 1). It answers like
OpenAI: 400 "you must provide a model parameter" or "Missing required parameter: 'file'.";
404 for a model not in `transcription_models`; 400 "Invalid file format. Supported formats:
['flac', ...]" for a file name without a supported extension; 413 "Maximum content size
limit (26214400) exceeded (N bytes read)" for a body over `transcription_max_bytes` (25 MB);
400 "Audio file might be corrupted or unsupported" for bytes whose magic is not audio (Ogg,
WAV, MP3, FLAC, MP4/M4A, WebM). The transcript is the next of `script_transcript`, else
what `tests.fakes.audio.fake_speech` put into the audio, else "" (silence).
The "*-transcribe" models refuse a `.oga` name as OpenAI does (400 "Unsupported file format
oga", param `file`, code `unsupported_value`); whisper-1 takes it. With
`transcriptions_supported = False` the route is missing (404 "404 page not found", nothing
recorded), like a local server without speech-to-text.
`fail_transcriptions_next` answers the next n valid requests with an HTTP error, after
`delay`. Every request is recorded in `transcriptions` as {"model", "file_name", "size",
"language", "response_format", "prompt", "temperature", "status"}.

Local model servers: `flavour` ("openai", "llama.cpp", "llama-cpp-python", "vllm" or
"ollama") and `window` (tokens) play where such a server says its context window and how it
refuses a request too long for it; see tests/fakes/openai_windows.py.

Standalone use: `python -m tests.fakes.openai_server --port 0 --reply "text"` prints
`READY <base_url>` and serves until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import inspect
import itertools
import json
import math
import re
import signal
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Self

from aiohttp import web

from tests.fakes.audio import (
    DEFAULT_TRANSCRIPTION_MODELS,
    MAX_TRANSCRIPTION_BYTES,
    Problem,
    heard,
    too_large,
    transcript_body,
    transcription_problem,
)
from tests.fakes.openai_vision import read_images
from tests.fakes.openai_windows import (
    FLAVOURS,
    add_routes,
    empty_stream,
    overflow,
    prompt_tokens,
)

FAULT_KINDS = ("status", "close", "malformed")
FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")
CHARS_PER_TOKEN = 4
ROLES = ("system", "developer", "user", "assistant", "tool")
PART_TYPES = ("text", "image_url")  # the content parts the fake understands
DETAILS = ("auto", "low", "high")
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")
# `structured_output_mode` -> the `response_format` types such a server knows.
STRUCTURED_OUTPUT_MODES = {
    "json_schema": RESPONSE_FORMAT_TYPES,
    "json_object": ("text", "json_object"),
    "text": ("text",),
}
_SCHEMA_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
DEFAULT_EMBEDDING_MODELS = ("text-embedding-3-small", "fake-embed")
# text-embedding-3-small's context; an input over it is refused with 400.
EMBEDDING_MAX_TOKENS = 8192
DEFAULT_EMBEDDING_DIMS = 64
MAX_EMBEDDING_INPUTS = 2048
EMBEDDING_FORMATS = ("float", "base64")
INVALID_INPUT = (
    "'$.input' is invalid. Please check the API reference: "
    "https://platform.openai.com/docs/api-reference."
)
_WORD = re.compile(r"\w+")
_STREAM_WORD = re.compile(r"\s*\S+\s*|\s+")  # a word and the whitespace after it
STREAM_CHARS = 16  # characters per streamed content chunk
MAX_BODY_BYTES = 64 * 1024 * 1024  # what aiohttp reads, above every limit the fake checks
TIMING = web.RequestKey("timing", dict)  # a chat request's timing record, for subclasses


@dataclass(frozen=True)
class Fault:
    """Describe a scripted reply that fails like an injected fault.

    kind="status" answers HTTP `status` with an OpenAI-style error, or with `body` (a str
    is sent as is, anything else as JSON); kind="close" drops the connection; and
    kind="malformed" answers 200 with a body that is not valid JSON.
    """

    status: int = 500
    body: Any = None
    kind: str = "status"

    def __post_init__(self) -> None:
        # A fault that cannot happen would make a test pass for the wrong reason.
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"Fault kind must be one of {FAULT_KINDS}, got {self.kind!r}")
        if self.kind == "status" and not 400 <= self.status <= 599:
            raise ValueError(f"Fault status must be an HTTP error (400-599), got {self.status}")

    def spec(self) -> tuple[Any, ...]:
        """Return the injected-fault tuple this fault is answered as."""
        return ("status", self.status, self.body) if self.kind == "status" else (self.kind,)


Reply = str | dict[str, Any] | Fault | Callable[[dict[str, Any]], Any]


class BackgroundAiohttpServer:
    """Serve an aiohttp application from a dedicated thread with its own event loop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None

    def _build_app(self) -> web.Application:
        """Return the application to serve."""
        raise NotImplementedError

    async def _startup(self) -> None:
        """Bind the site and remember the chosen port."""
        self._stopping = asyncio.Event()
        runner = web.AppRunner(
            self._build_app(), handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self._runner = runner
        self.port = int(runner.addresses[0][1])

    async def _shutdown(self) -> None:
        """Wake sleeping handlers and close the site."""
        if self._stopping is not None:
            self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _run(self, ready: threading.Event, errors: list[BaseException]) -> None:
        """Run the event loop until `stop` is called."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            loop.run_until_complete(self._startup())
        except BaseException as exc:  # reported to the starting thread
            errors.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    def start(self) -> Self:
        """Start serving in the background and return self."""
        if self._thread is not None:
            return self
        ready, errors = threading.Event(), []
        self._thread = threading.Thread(
            target=self._run, args=(ready, errors), name=type(self).__name__, daemon=True
        )
        self._thread.start()
        ready.wait(10)
        if errors or not ready.is_set():
            self._thread = None
            raise RuntimeError(f"{type(self).__name__} failed to start") from (
                errors[0] if errors else None
            )
        return self

    def stop(self) -> None:
        """Stop serving and join the background thread."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake up early when the server is stopping."""
        assert self._stopping is not None
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            pass


def message_text(message: dict[str, Any]) -> str:
    """Return the plain text of one chat message, including tool-call arguments."""
    content = message.get("content")
    if isinstance(content, list):
        text = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    else:
        text = content or ""
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        text += fn.get("name", "") + fn.get("arguments", "")
    return str(text)


def echo_reply(request: dict[str, Any]) -> str:
    """Answer "ok: " plus the first 40 characters of the last user message."""
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    return "ok: " + (message_text(users[-1])[:40] if users else "")


def fake_embedding(
    text: str, dims: int = DEFAULT_EMBEDDING_DIMS, synonyms: Mapping[str, str] | None = None
) -> list[float]:
    """Return the fake server's deterministic unit vector for `text`."""
    return _stem_vector(_WORD.findall(text.lower()), dims, synonyms)


def _stem_vector(words: list[str], dims: int, synonyms: Mapping[str, str] | None) -> list[float]:
    """Hash each word's 5-character stem to a dimension and L2-normalize the counts."""
    if dims < 1:
        raise ValueError(f"dims must be positive, got {dims}")
    table = {k.lower(): v.lower() for k, v in (synonyms or {}).items()}
    vector = [0.0] * dims
    for word in words:
        stem = table.get(word, word)[:5]
        vector[zlib.crc32(stem.encode()) % dims] += 1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if not norm:
        vector[0] = 1.0
        return vector
    return [x / norm for x in vector]


class FakeOpenAI(BackgroundAiohttpServer):
    """A scripted OpenAI-compatible server; see the module docstring for semantics."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self.default_reply: Reply = echo_reply
        self.delay: float = 0.0
        self.stream_delay: float = 0.0
        self.stream_words = False
        self.cancelled_streams = 0
        self.supports_structured_output = True
        self.structured_output_mode = "json_schema"
        self.honours_max_completion_tokens = True
        self.reports_usage = True
        self.cached_prompt_tokens = 0
        self.concurrency_key: Callable[[dict[str, Any]], Any] | None = None
        self.slots = 0
        self.token_seconds = 0.0
        self.served: list[int] = []
        self._slot_gate: tuple[int, asyncio.Semaphore] | None = None
        self.models: list[str] = ["gpt-4o-mini", "gpt-4.1-mini", "fake-model"]
        self.requests: list[dict[str, Any]] = []
        self.request_times: list[dict[str, float | None]] = []
        self.timings: list[float] = []
        self.max_concurrent = 0
        self.overlaps = 0
        self.overlap_keys: list[Any] = []
        self._queue: deque[Reply] = deque()
        self._model_queues: dict[str, deque[Reply]] = {}
        self._model_defaults: dict[str, Reply] = {}
        self._faults: deque[tuple[Any, ...]] = deque()
        self._delays: deque[float] = deque()
        self._in_flight = 0
        self._in_flight_keys: dict[Any, int] = {}
        # Bumped by clear(): a request admitted before it ends without touching new records.
        self._generation = 0
        self._ids = itertools.count(1)
        self.embedding_models: list[str] = list(DEFAULT_EMBEDDING_MODELS)
        self.embedding_dims = DEFAULT_EMBEDDING_DIMS
        self.embedding_max_tokens = EMBEDDING_MAX_TOKENS
        self.embedding_synonyms: dict[str, str] = {}
        self.embeddings_down = False
        self.embedding_requests: list[Any] = []
        self._embedding_faults: deque[tuple[Any, ...]] = deque()
        self._embedding_delays: deque[float] = deque()
        self.transcription_models: list[str] = list(DEFAULT_TRANSCRIPTION_MODELS)
        self.transcription_max_bytes = MAX_TRANSCRIPTION_BYTES
        self.transcriptions_supported = True
        self.transcriptions: list[dict[str, Any]] = []
        self.images_seen: list[dict[str, Any]] = []
        self.flavour = "openai"
        self.window: int | None = None
        self.truncated: list[int] = []
        self._vision_models: set[str] | None = None
        self._transcripts: deque[str] = deque()
        self._transcription_faults: deque[tuple[Any, ...]] = deque()

    @property
    def vision_models(self) -> set[str]:
        """Return the models that accept image parts.

        Unless set, every listed model whose name holds "gpt-4o" or "gpt-4.1", and
        "fake-vision".
        """
        with self._lock:
            if self._vision_models is not None:
                return set(self._vision_models)
            return {m for m in self.models if "gpt-4o" in m or "gpt-4.1" in m} | {"fake-vision"}

    @vision_models.setter
    def vision_models(self, models: Iterable[str]) -> None:
        with self._lock:
            self._vision_models = set(models)

    @property
    def base_url(self) -> str:
        """Return the URL to pass as `ChatOpenAI(base_url=...)`."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def handled_seconds(self) -> float:
        """Return the total server-side handling time of all requests."""
        with self._lock:
            return sum(self.timings)

    @property
    def in_flight(self) -> int:
        """Return how many requests are being handled right now."""
        with self._lock:
            return self._in_flight

    def script(self, *replies: Reply) -> None:
        """Queue replies for any model, consumed in order."""
        with self._lock:
            self._queue.extend(replies)

    def script_for(self, model: str, *replies: Reply) -> None:
        """Queue replies used only for requests whose `model` equals `model`."""
        with self._lock:
            self._model_queues.setdefault(model, deque()).extend(replies)
            if model not in self.models:
                self.models.append(model)

    def default_for(self, model: str, reply: Reply) -> None:
        """Answer `model` with `reply` whenever its own queue is empty.

        Such a model never takes replies from the shared queue (`script`), so a second
        model (a summarizer) cannot eat the replies scripted for the chat model.
        """
        with self._lock:
            self._model_defaults[model] = reply
            if model not in self.models:
                self.models.append(model)

    def unscript(self, model: str | None = None) -> None:
        """Drop the replies still queued for `model` (None: the shared queue)."""
        with self._lock:
            if model is None:
                self._queue.clear()
            else:
                self._model_queues.pop(model, None)

    def pending_replies(self) -> int:
        """Return how many scripted replies are still queued."""
        with self._lock:
            return len(self._queue) + sum(len(q) for q in self._model_queues.values())

    def fail_next(self, n: int = 1, status: int = 500, body: Any = None) -> None:
        """Answer the next n requests with an HTTP error (OpenAI-style JSON unless `body`)."""
        with self._lock:
            self._faults.extend([("status", status, body)] * n)

    def malformed_next(self, n: int = 1) -> None:
        """Answer the next n requests with 200 and a body that is not valid JSON."""
        with self._lock:
            self._faults.extend([("malformed",)] * n)

    def empty_next(self, n: int = 1, mode: str = "content") -> None:
        """Answer the next n requests with empty content ("content") or no choices ("choices")."""
        with self._lock:
            self._faults.extend([("empty", mode)] * n)

    def close_connection_next(self, n: int = 1) -> None:
        """Drop the connection of the next n requests without answering."""
        with self._lock:
            self._faults.extend([("close",)] * n)

    def delay_next(self, n: int, seconds: float) -> None:
        """Sleep `seconds` before answering each of the next n requests (instead of `delay`)."""
        with self._lock:
            self._delays.extend([seconds] * n)

    def fail_embeddings_next(self, n: int = 1, status: int = 500, body: Any = None) -> None:
        """Answer the next n valid embedding requests with an HTTP error (OpenAI-style JSON)."""
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error (400-599), got {status}")
        with self._lock:
            self._embedding_faults.extend([("status", status, body)] * n)

    def delay_embeddings_next(self, n: int, seconds: float) -> None:
        """Sleep `seconds` before answering each of the next n valid embedding requests."""
        with self._lock:
            self._embedding_delays.extend([seconds] * n)

    def script_transcript(self, *texts: str) -> None:
        """Queue transcripts that the next valid transcriptions return, whatever they hear."""
        with self._lock:
            self._transcripts.extend(texts)

    def fail_transcriptions_next(self, n: int = 1, status: int = 500, body: Any = None) -> None:
        """Answer the next n valid transcription requests with an HTTP error."""
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error (400-599), got {status}")
        with self._lock:
            self._transcription_faults.extend([("status", status, body)] * n)

    def last_request(self) -> dict[str, Any] | None:
        """Return the most recent request body, if any."""
        with self._lock:
            return self.requests[-1] if self.requests else None

    def requests_for(self, model: str) -> list[dict[str, Any]]:
        """Return the recorded request bodies for one model."""
        with self._lock:
            return [r for r in self.requests if r.get("model") == model]

    def clear(self) -> None:
        """Forget recorded requests, timings, counters (cancelled streams too), scripts,
        pending faults, transcriptions and images seen."""
        with self._lock:
            self._generation += 1
            self.requests.clear()
            self.request_times.clear()
            self.timings.clear()
            self.overlap_keys.clear()
            self.served.clear()
            self.max_concurrent = self.overlaps = self.cancelled_streams = 0
            self._queue.clear()
            self._model_queues.clear()
            self._model_defaults.clear()
            self._faults.clear()
            self._delays.clear()
            self.embedding_requests.clear()
            self._embedding_faults.clear()
            self._embedding_delays.clear()
            self.transcriptions.clear()
            self.images_seen.clear()
            self._transcripts.clear()
            self._transcription_faults.clear()

    def reset(self) -> None:
        """Clear everything and restore the defaults, flags, streaming pace and embedding,
        transcription and vision settings."""
        with self._lock:
            self.clear()
            self.default_reply = echo_reply
            self.delay = 0.0
            self.stream_delay = 0.0
            self.stream_words = False
            self.concurrency_key = None
            self.slots = 0
            self.token_seconds = 0.0
            self.supports_structured_output = True
            self.structured_output_mode = "json_schema"
            self.honours_max_completion_tokens = True
            self.reports_usage = True
            self.cached_prompt_tokens = 0
            self.embeddings_down = False
            self.embedding_synonyms = {}
            self.embedding_dims = DEFAULT_EMBEDDING_DIMS
            self.embedding_max_tokens = EMBEDDING_MAX_TOKENS
            self.embedding_models = list(DEFAULT_EMBEDDING_MODELS)
            self.transcription_models = list(DEFAULT_TRANSCRIPTION_MODELS)
            self.transcription_max_bytes = MAX_TRANSCRIPTION_BYTES
            self.transcriptions_supported = True
            self._vision_models = None
            self.flavour = "openai"
            self.window = None
            self.truncated = []

    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        for prefix in ("/v1", ""):
            app.router.add_post(prefix + "/chat/completions", self._chat)
            app.router.add_post(prefix + "/embeddings", self._embeddings)
            app.router.add_post(prefix + "/audio/transcriptions", self._transcriptions)
            app.router.add_get(prefix + "/models", self._models)
        add_routes(app, self)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        if self.flavour == "vllm" and self.window:
            data = [{**entry, "max_model_len": self.window} for entry in data]
        return web.json_response({"object": "list", "data": data})

    def _admit(
        self, body: dict[str, Any], timing: dict[str, float | None]
    ) -> tuple[Any, tuple[Any, ...] | None, float, Reply]:
        """Record a request (and its `timing`), track concurrency and pick its fault, delay
        and reply.

        An invalid request gets an ("invalid", message, param) fault and consumes nothing else.
        """
        key = None
        if self.concurrency_key is not None:
            try:
                key = self.concurrency_key(body)
            except Exception:  # a bad key function just disables tracking
                key = None
        with self._lock:
            self.requests.append(body)
            self.request_times.append(timing)
            self._in_flight += 1
            self.max_concurrent = max(self.max_concurrent, self._in_flight)
            if key is not None:
                if self._in_flight_keys.get(key, 0) > 0:
                    self.overlaps += 1
                    self.overlap_keys.append(key)
                self._in_flight_keys[key] = self._in_flight_keys.get(key, 0) + 1
            rejection = chat_rejection(body, self.supports_structured_output)
            if rejection is not None:
                return key, ("invalid", *rejection), 0.0, self.default_reply
            unknown = unknown_format(body, self.structured_output_mode)
            if unknown is not None:
                return key, ("status", 500, unknown), 0.0, self.default_reply
            images, refusal = read_images(body, self.vision_models)
            if refusal is not None:
                return key, ("invalid", *refusal), 0.0, self.default_reply
            self.images_seen.extend(images)
            if self.flavour not in FLAVOURS:
                raise ValueError(f"flavour must be one of {FLAVOURS}, got {self.flavour!r}")
            refused = overflow(self.flavour, self.window, body)
            if refused is not None:
                return key, refused, 0.0, self.default_reply
            if self.flavour == "ollama" and self.window:
                tokens = prompt_tokens(body)
                if tokens > self.window:
                    self.truncated.append(tokens)
            delay = self._delays.popleft() if self._delays else self.delay
            fault = self._faults.popleft() if self._faults else None
            reply: Reply = self.default_reply
            if fault is None:
                model = str(body.get("model"))
                model_queue = self._model_queues.get(model)
                if model_queue:
                    reply = model_queue.popleft()
                elif model in self._model_defaults:
                    reply = self._model_defaults[model]
                elif self._queue:
                    reply = self._queue.popleft()
        return key, fault, delay, reply

    def _release(self, key: Any, started: float, generation: int) -> None:
        with self._lock:
            self._in_flight -= 1
            if key is not None:
                self._in_flight_keys[key] -= 1
            if generation == self._generation:
                self.timings.append(time.perf_counter() - started)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        timing: dict[str, float | None] = {"arrived": time.time(), "first_content": None}
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _error(400, "invalid JSON body", "invalid_request_error")
        request[TIMING] = timing
        generation = self._generation
        key, fault, delay, reply = self._admit(body, timing)
        index = len(self.requests) - 1  # no await since _admit recorded it
        slot = None
        try:
            slot = await self._take_slot(index, generation)
            if delay:
                await self._sleep(delay)
            if fault is None and callable(reply):
                reply = reply(body)
                if inspect.isawaitable(reply):
                    reply = await reply
            if fault is None and isinstance(reply, Fault):
                fault = reply.spec()
            if fault is not None:
                return await self._fault(request, fault, body)
            return await self._answer(request, body, _normalize(reply))
        except (asyncio.CancelledError, ConnectionResetError) as exc:
            # The client went away (a dropped connection we injected is not that).
            if body.get("stream") and (fault is None or fault[0] != "close"):
                with self._lock:
                    if generation == self._generation:
                        self.cancelled_streams += 1
            if isinstance(exc, ConnectionResetError):
                # Nobody is left to answer: end quietly instead of logging a 500.
                raise asyncio.CancelledError from exc
            raise
        finally:
            if slot is not None:
                slot.release()
            self._release(key, started, generation)

    async def _take_slot(self, index: int, generation: int) -> asyncio.Semaphore | None:
        """Wait for one of `slots` (none with `slots = 0`); note that `index` is served."""
        slot = None
        if self.slots:
            if self._slot_gate is None or self._slot_gate[0] != self.slots:
                self._slot_gate = (self.slots, asyncio.Semaphore(self.slots))
            slot = self._slot_gate[1]
            await slot.acquire()
        with self._lock:
            if generation == self._generation:
                self.served.append(index)
        return slot

    def _token_time(self, text: str) -> float:
        return self.token_seconds * max(1, len(text) // CHARS_PER_TOKEN)

    async def _write_time(self, text: str) -> None:
        """Take the time the server takes to write `text` (`token_seconds`)."""
        if self.token_seconds > 0 and text:
            await self._sleep(self._token_time(text))

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw)
            parsed = True
        except ValueError:
            body, parsed = raw.decode("utf-8", "replace"), False
        with self._lock:
            self.embedding_requests.append(body)
            if self.embeddings_down:
                return _error(503, "fake embeddings service unavailable", "server_error")
            if not parsed:
                return _error(400, "invalid JSON body", "invalid_request_error")
            rejection = embedding_rejection(body, self.embedding_models, self.embedding_dims)
            if rejection is None:
                rejection = too_long(body["input"], self.embedding_max_tokens)
            if rejection is not None:
                return rejection
            delay = self._embedding_delays.popleft() if self._embedding_delays else 0.0
            fault = self._embedding_faults.popleft() if self._embedding_faults else None
            dims = body.get("dimensions") or self.embedding_dims
            synonyms = dict(self.embedding_synonyms)
        if delay:
            await self._sleep(delay)
        if fault is not None:
            return await self._fault(request, fault, body)
        data, tokens = [], 0
        for index, item in enumerate(_embedding_inputs(body["input"]) or []):
            words = _WORD.findall(item.lower()) if isinstance(item, str) else list(map(str, item))
            tokens += max(1, len(words))
            vector = _stem_vector(words, dims, synonyms)
            embedding: Any = vector
            if body.get("encoding_format") == "base64":
                packed = struct.pack(f"<{len(vector)}f", *vector)
                embedding = base64.b64encode(packed).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return web.json_response(
            {"object": "list", "data": data, "model": body["model"], "usage": usage}
        )

    async def _transcriptions(self, request: web.Request) -> web.StreamResponse:
        if not self.transcriptions_supported:
            return web.Response(status=404, text="404 page not found")
        form = await _form(request)
        upload = form.get("file")
        data = upload[1] if isinstance(upload, tuple) else b""
        size = request.content_length or len(data)
        record = {"model": form.get("model"), "file_name": upload[0] if upload else None}
        record |= {"size": len(data), "language": form.get("language")}
        record |= {"response_format": form.get("response_format") or "json"}
        record |= {"prompt": form.get("prompt"), "temperature": form.get("temperature")}
        with self._lock:
            self.transcriptions.append(record)
            problem = transcription_problem(form, self.transcription_models)
            if size > self.transcription_max_bytes:
                problem = too_large(self.transcription_max_bytes, size)
            if problem is not None:
                record["status"] = problem.status
                return _problem(problem)
            fault = self._transcription_faults.popleft() if self._transcription_faults else None
            text = self._transcripts.popleft() if self._transcripts else heard(data)
            record["status"] = fault[1] if fault else 200
            delay = self.delay
        if delay:
            await self._sleep(delay)
        if fault is not None:
            return await self._fault(request, fault, {})
        body, content_type = transcript_body(text, record["response_format"], record["language"])
        return web.Response(text=body, content_type=content_type)

    async def _fault(
        self, request: web.Request, fault: tuple[Any, ...], body: dict[str, Any]
    ) -> web.StreamResponse:
        kind = fault[0]
        if kind == "invalid":
            code = fault[3] if len(fault) > 3 else None
            return _error(400, fault[1], "invalid_request_error", param=fault[2], code=code)
        if kind == "status":
            status, payload = fault[1], fault[2]
            if payload is None:
                return _error(status, f"fake error {status}", "server_error")
            if isinstance(payload, str):
                return web.Response(status=status, text=payload, content_type="application/json")
            return web.json_response(payload, status=status)
        if kind == "empty_stream":
            return await empty_stream(request)
        if kind == "malformed":
            broken = '{"id": "chatcmpl-broken", "choices": [{'
            return web.Response(text=broken, status=200, content_type="application/json")
        if kind == "close":
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        choices_empty = fault[1] == "choices"
        return await self._answer(request, body, {"content": ""}, no_choices=choices_empty)

    async def _answer(
        self,
        request: web.Request,
        body: dict[str, Any],
        reply: dict[str, Any],
        no_choices: bool = False,
    ) -> web.StreamResponse:
        n = next(self._ids)
        content = reply.get("content")
        tool_calls = [
            {
                "id": call.get("id") or f"call_fake{n:04d}x{i}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": json.dumps(call.get("args", {}), ensure_ascii=False),
                },
            }
            for i, call in enumerate(reply.get("tool_calls") or [])
        ]
        cap = self._output_cap(body)
        cut = False
        if cap is not None:
            content, tool_calls, cut = _fit(content, tool_calls, cap)
        refusal = reply.get("refusal")
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
        if tool_calls:
            message["tool_calls"] = tool_calls
        prompt = sum(len(message_text(m)) for m in body.get("messages", [])) // 4
        completion = len(message_text(message)) // 4
        usage: dict[str, Any] = {
            "prompt_tokens": max(1, prompt),
            "completion_tokens": completion,
            "total_tokens": max(1, prompt) + completion,
        }
        if self.cached_prompt_tokens:
            cached = min(self.cached_prompt_tokens, usage["prompt_tokens"])
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        head = {"id": f"chatcmpl-fake{n:06d}", "created": int(time.time())}
        head["model"] = body.get("model", "fake-model")
        finish = "length" if cut else "tool_calls" if tool_calls else "stop"
        finish = reply.get("finish_reason") or finish
        if body.get("stream"):
            return await self._stream(request, head, message, finish, usage, body, no_choices)
        await self._write_time(message_text(message))
        choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        choices = [] if no_choices else [choice]
        if content and not no_choices:
            _first_content(request)
        answer = {**head, "object": "chat.completion", "choices": choices, "usage": usage}
        if not self.reports_usage:
            del answer["usage"]
        return web.json_response(answer)

    def _pieces(self, text: str) -> list[str]:
        """Cut streamed content into its chunks: words, or STREAM_CHARS characters."""
        if self.stream_words:
            return _STREAM_WORD.findall(text)
        return [text[i : i + STREAM_CHARS] for i in range(0, len(text), STREAM_CHARS)]

    def _output_cap(self, body: dict[str, Any]) -> int | None:
        """Return the output cap this server honours for the request, in tokens."""
        if self.honours_max_completion_tokens and body.get("max_completion_tokens") is not None:
            return int(body["max_completion_tokens"])
        return None if body.get("max_tokens") is None else int(body["max_tokens"])

    async def _stream(
        self,
        request: web.Request,
        head: dict[str, Any],
        message: dict[str, Any],
        finish: str,
        usage: dict[str, Any],
        body: dict[str, Any],
        no_choices: bool,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(delta: dict[str, Any] | None, finish_reason: str | None = None) -> None:
            chunk = {**head, "object": "chat.completion.chunk", "choices": []}
            if delta is not None:
                choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
                chunk["choices"] = [{**choice, "logprobs": None}]
            else:
                chunk["usage"] = usage
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        if not no_choices:
            await send({"role": "assistant", "content": ""})
            if message.get("refusal"):
                await send({"refusal": message["refusal"]})
            for i, piece in enumerate(self._pieces(message.get("content") or "")):
                if i and self.stream_delay > 0 and self.stream_delay >= self._token_time(piece):
                    await self._sleep(self.stream_delay)
                elif self.token_seconds > 0:
                    await self._write_time(piece)
                await send({"content": piece})
                if i == 0:
                    _first_content(request)
            for i, call in enumerate(message.get("tool_calls") or []):
                fn = call["function"]
                first = {"index": i, "id": call["id"], "type": "function"}
                first["function"] = {"name": fn["name"], "arguments": ""}
                await send({"tool_calls": [first]})
                await send(
                    {"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]}
                )
            await send({}, finish)
        if (body.get("stream_options") or {}).get("include_usage") and self.reports_usage:
            await send(None)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _first_content(request: web.Request) -> None:
    """Note in the request's timing record that its first content goes out now."""
    timing = request.get(TIMING)
    if timing is not None and timing["first_content"] is None:
        timing["first_content"] = time.time()


def _fit(
    content: str | None, tool_calls: list[dict[str, Any]], cap: int
) -> tuple[str | None, list[dict[str, Any]], bool]:
    """Cut a reply to `cap` tokens: the content first, then the tool calls that fit whole."""
    room = cap * CHARS_PER_TOKEN
    text = content or ""
    cut = len(text) > room
    if cut:
        content, text = text[:room], text[:room]
    room -= len(text)
    kept = []
    for call in tool_calls:
        size = len(call["function"]["name"]) + len(call["function"]["arguments"])
        if cut or size > room:
            cut = True
            continue
        kept.append(call)
        room -= size
    return content, kept, cut


def _normalize(reply: Any) -> dict[str, Any]:
    """Turn a scripted reply (str or dict) into {"content", "tool_calls"} (and its
    "finish_reason" and "refusal" when it says them)."""
    if isinstance(reply, str):
        return {"content": reply}
    if isinstance(reply, dict):
        content = reply.get("content")
        if content is None and not reply.get("tool_calls") and not reply.get("refusal"):
            content = ""
        finish = reply.get("finish_reason")
        if finish is not None and finish not in FINISH_REASONS:
            raise TypeError(f"finish_reason must be one of {FINISH_REASONS}, got {finish!r}")
        normal = {"content": content, "tool_calls": reply.get("tool_calls") or []}
        said = {"finish_reason": finish, "refusal": reply.get("refusal")}
        return normal | {k: v for k, v in said.items() if v}
    raise TypeError(
        f"scripted reply must be str, dict, Fault or callable, got {type(reply).__name__}"
    )


def _error(
    status: int, message: str, kind: str, param: str | None = None, code: str | None = None
) -> web.Response:
    """Return an OpenAI-style error response."""
    error = {"message": message, "type": kind, "param": param, "code": code}
    return web.json_response({"error": error}, status=status)


def _problem(problem: Problem) -> web.Response:
    """Return the OpenAI-style answer to a rejected transcription."""
    return _error(problem.status, problem.message, problem.kind, problem.param, problem.code)


async def _form(request: web.Request) -> dict[str, Any]:
    """Read a form: fields as strings, files as (file name, bytes) pairs."""
    form: dict[str, Any] = {}
    for key, value in (await request.post()).items():
        if isinstance(value, web.FileField):
            form[key] = (value.filename, value.file.read())
        else:
            form[key] = str(value)
    return form


def _bad_type(param: str, expected: str, value: Any) -> str:
    """Word a wrong-type error the way OpenAI does."""
    if value is None:
        got = "null"
    elif isinstance(value, bool):
        got = "a boolean"
    elif isinstance(value, int):
        got = "an integer"
    elif isinstance(value, float):
        got = "a decimal"
    elif isinstance(value, str):
        got = "a string"
    else:
        got = "an array" if isinstance(value, list) else "an object"
    return f"Invalid type for '{param}': expected {expected}, but got {got} instead."


def chat_rejection(body: Any, supports_json_schema: bool = True) -> tuple[str, str] | None:
    """Return (message, param) of the 400 OpenAI would answer a chat request with, or None."""
    if not isinstance(body, dict):
        return _bad_type("body", "an object", body), "body"
    for param in ("max_completion_tokens", "max_tokens"):
        value = body.get(param)
        if value is None:
            continue
        if not _is_token(value):
            return _bad_type(param, "an integer", value), param
        if value < 1:
            return (
                f"Invalid '{param}': integer below minimum value. "
                f"Expected a value >= 1, but got {value} instead."
            ), param
    problem = messages_problem(body)
    if problem is not None:
        return problem
    if body.get("tool_choice") is not None and not body.get("tools"):
        return (
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
            "are specified."
        ), "tool_choice"
    problem_text = response_format_problem(body, supports_json_schema)
    return None if problem_text is None else (problem_text, "response_format")


def messages_problem(body: dict[str, Any]) -> tuple[str, str] | None:
    """Return (message, param) of the first breach of OpenAI's message protocol, or None."""
    messages = body.get("messages")
    if messages is None:
        return "Missing required parameter: 'messages'.", "messages"
    if not isinstance(messages, list):
        return _bad_type("messages", "an array", messages), "messages"
    if not messages:
        return (
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            "messages",
        )
    open_calls: dict[str, int] = {}  # unanswered tool call id -> its assistant message
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return _bad_type(f"messages[{i}]", "an object", message), f"messages[{i}]"
        problem = _message_shape_problem(i, message)
        if problem is not None:
            return problem
        role = message["role"]
        if role == "tool":
            call_id = message["tool_call_id"]
            if call_id not in open_calls:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                ), f"messages.[{i}].role"
            del open_calls[call_id]
            continue
        if open_calls:
            ids = ", ".join(open_calls)
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {ids}"
            ), f"messages.[{i}].role"
        if role == "assistant":
            open_calls = {call["id"]: i for call in message.get("tool_calls") or []}
    if open_calls:
        ids = ", ".join(open_calls)
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {ids}"
        ), f"messages.[{len(messages)}].role"
    return None


def _message_shape_problem(i: int, message: dict[str, Any]) -> tuple[str, str] | None:
    """Return (message, param) if one message's role, content or tool calls are malformed."""
    role = message.get("role")
    if role is None:
        return f"Missing required parameter: 'messages[{i}].role'.", f"messages[{i}].role"
    if role not in ROLES:
        return (
            f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
            "'function', 'tool', and 'developer'."
        ), f"messages[{i}].role"
    calls = message.get("tool_calls")
    if calls is not None and role != "assistant":
        return f"Unrecognized request argument supplied: messages[{i}].tool_calls", f"messages[{i}]"
    content = message.get("content")
    if content is None and not (role == "assistant" and calls):
        where = f"messages[{i}].content"
        if "content" in message:
            return _bad_type(where, "a string or an array", None), where
        return f"Missing required parameter: '{where}'.", where
    if content is not None and not isinstance(content, str | list):
        where = f"messages[{i}].content"
        return _bad_type(where, "a string or an array", content), where
    if isinstance(content, list) and (problem := _content_problem(i, role, content)):
        return problem
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        where = f"messages[{i}].tool_call_id"
        return f"Missing required parameter: '{where}'.", where
    if calls is None:
        return None
    if not isinstance(calls, list):
        where = f"messages[{i}].tool_calls"
        return _bad_type(where, "an array", calls), where
    for j, call in enumerate(calls):
        where = f"messages[{i}].tool_calls[{j}]"
        if not isinstance(call, dict):
            return _bad_type(where, "an object", call), where
        if not isinstance(call.get("id"), str):
            return f"Missing required parameter: '{where}.id'.", f"{where}.id"
        if call.get("type") != "function":
            return f"Missing required parameter: '{where}.type'.", f"{where}.type"
        fn = call.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return f"Missing required parameter: '{where}.function.name'.", f"{where}.function"
    return None


def _content_problem(i: int, role: str, content: list[Any]) -> tuple[str, str] | None:
    """Return (message, param) if a message's content array is malformed, else None."""
    where = f"messages[{i}].content"
    if not content:
        return (
            f"Invalid '{where}': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead."
        ), where
    for j, part in enumerate(content):
        problem = _part_problem(f"{where}[{j}]", part)
        if problem is not None:
            return problem
        if part["type"] == "image_url" and role != "user":
            return (
                f"Invalid 'messages[{i}]'. Image URLs are only allowed for messages with role "
                f"'user', but this message with role '{role}' contains an image URL."
            ), f"messages[{i}]"
    return None


def _part_problem(where: str, part: Any) -> tuple[str, str] | None:
    """Return (message, param) if one content part is malformed, else None."""
    if not isinstance(part, dict):
        return _bad_type(where, "an object", part), where
    kind = part.get("type")
    if kind is None:
        return f"Missing required parameter: '{where}.type'.", f"{where}.type"
    if kind not in PART_TYPES:
        message = f"Invalid value: '{kind}'. Supported values are: 'text' and 'image_url'."
        return message, f"{where}.type"
    if kind == "text":
        if "text" not in part:
            return f"Missing required parameter: '{where}.text'.", f"{where}.text"
        if not isinstance(part["text"], str):
            return _bad_type(f"{where}.text", "a string", part["text"]), f"{where}.text"
        return None
    image = part.get("image_url")
    if image is None:
        return f"Missing required parameter: '{where}.image_url'.", f"{where}.image_url"
    if not isinstance(image, dict):
        return _bad_type(f"{where}.image_url", "an object", image), f"{where}.image_url"
    if not isinstance(image.get("url"), str):
        return f"Missing required parameter: '{where}.image_url.url'.", f"{where}.image_url.url"
    detail = image.get("detail")
    if detail is not None and detail not in DETAILS:
        message = f"Invalid value: '{detail}'. Supported values are: 'auto', 'low', and 'high'."
        return message, f"{where}.image_url.detail"
    return None


def response_format_problem(body: dict[str, Any], supports_json_schema: bool = True) -> str | None:
    """Return why OpenAI would reject the request's `response_format`, or None if it is fine."""
    if "response_format" not in body:
        return None
    fmt = body["response_format"]
    if not isinstance(fmt, dict):
        return _bad_type("response_format", "an object", fmt)
    kind = fmt.get("type")
    if kind is None:
        return "Missing required parameter: 'response_format.type'."
    if not isinstance(kind, str):
        return _bad_type("response_format.type", "a string", kind)
    if kind not in RESPONSE_FORMAT_TYPES:
        return (
            f"Invalid value: '{kind}'. Supported values are: "
            "'text', 'json_object', and 'json_schema'."
        )
    if kind == "json_schema" and not supports_json_schema:
        return "response_format type 'json_schema' is not supported"
    if kind == "json_object":
        if not any("json" in message_text(m).lower() for m in _messages(body)):
            return (
                "'messages' must contain the word 'json' in some form, to use "
                "'response_format' of type 'json_object'."
            )
        return None
    if kind == "json_schema":
        return _json_schema_problem(fmt.get("json_schema"))
    return None


def unknown_format(body: dict[str, Any], mode: str) -> dict[str, Any] | None:
    """Return the 500 body a server of `structured_output_mode` answers a `response_format`
    type it does not know with (llama-cpp-python's pydantic validation error), or None."""
    known = STRUCTURED_OUTPUT_MODES[mode]
    kind = (body.get("response_format") or {}).get("type")
    if kind is None or kind in known:
        return None
    expected = " or ".join(f"'{k}'" for k in known)
    detail = {
        "type": "literal_error",
        "loc": ("body", "response_format", "type"),
        "msg": f"Input should be {expected}",
        "input": kind,
        "ctx": {"expected": expected},
    }
    error = {"message": str([detail]), "type": "internal_server_error"}
    return {"error": error | {"param": None, "code": None}}


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the request's messages that are objects."""
    messages = body.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def _json_schema_problem(spec: Any) -> str | None:
    """Return why a `response_format.json_schema` object is invalid, or None."""
    where = "response_format.json_schema"
    if spec is None:
        return f"Missing required parameter: '{where}'."
    if not isinstance(spec, dict):
        return _bad_type(where, "an object", spec)
    name = spec.get("name")
    if name is None:
        return f"Missing required parameter: '{where}.name'."
    if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name):
        return (
            f"Invalid '{where}.name': string does not match pattern. "
            "Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'."
        )
    schema = spec.get("schema")
    if schema is None:
        return f"Missing required parameter: '{where}.schema'."
    if not isinstance(schema, dict):
        return _bad_type(f"{where}.schema", "an object", schema)
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        return _bad_type(f"{where}.strict", "a boolean", strict)
    if not strict:
        return None
    problem = _strict_root_problem(schema) or _strict_schema_problem(schema, ())
    return None if problem is None else f"Invalid schema for response_format '{name}': {problem}"


def _strict_root_problem(schema: dict[str, Any]) -> str | None:
    """Return why a strict schema's root is not an object, or None."""
    if schema.get("type") == "object":
        return None
    got = schema.get("type")
    shown = got if isinstance(got, str) else json.dumps(got)
    return f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{shown}\"'."


def _strict_schema_problem(schema: Any, context: tuple[str, ...]) -> str | None:
    """Return the first strict-mode violation in a (sub)schema, naming where it is, or None."""
    if not isinstance(schema, dict):
        return f"In context={context}, schema must be a JSON Schema object."
    types = schema.get("type")
    is_object = types == "object" or (isinstance(types, list) and "object" in types)
    properties = schema.get("properties")
    if is_object or properties is not None:
        if schema.get("additionalProperties") is not False:
            return (
                f"In context={context}, 'additionalProperties' is required to be supplied "
                "and to be false."
            )
        keys = list(properties) if isinstance(properties, dict) else []
        required = schema.get("required")
        listed = required if isinstance(required, list) else []
        missing = [k for k in keys if k not in listed]
        if not isinstance(required, list) or missing:
            shown = f" Missing '{missing[0]}'." if missing else ""
            return (
                f"In context={context}, 'required' is required to be supplied and to be an "
                f"array including every key in properties.{shown}"
            )
        extra = [k for k in listed if k not in keys]
        if extra:
            return f"In context={context}, Extra required key '{extra[0]}' supplied."
    children: list[tuple[tuple[str, ...], Any]] = []
    for key in ("properties", "$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            children += [((*context, key, name), sub) for name, sub in schema[key].items()]
    if "items" in schema:
        children.append(((*context, "items"), schema["items"]))
    if isinstance(schema.get("anyOf"), list):
        children += [((*context, "anyOf", str(i)), sub) for i, sub in enumerate(schema["anyOf"])]
    for where, sub in children:
        problem = _strict_schema_problem(sub, where)
        if problem is not None:
            return problem
    return None


def _is_token(value: Any) -> bool:
    """Tell whether a value is an integer token id (booleans are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _embedding_inputs(value: Any) -> list[str | list[int]] | None:
    """Return the separate inputs of an embeddings `input`, or None if OpenAI would reject it."""
    if isinstance(value, str):
        return [value] if value else None
    if not isinstance(value, list) or not value:
        return None
    if all(isinstance(item, str) for item in value):
        return list(value) if all(value) else None
    if all(_is_token(item) for item in value):
        return [value]
    if all(isinstance(item, list) and item and all(map(_is_token, item)) for item in value):
        return list(value)
    return None


def too_long(value: Any, max_tokens: int) -> web.Response | None:
    """Return OpenAI's 400 for an input over the model's context (tokens counted as words)."""
    for item in _embedding_inputs(value) or []:
        tokens = max(1, len(_WORD.findall(item)) if isinstance(item, str) else len(item))
        if tokens > max_tokens:
            message = (
                f"This model's maximum context length is {max_tokens} tokens, however you "
                f"requested {tokens} tokens ({tokens} in your prompt; 0 for the completion). "
                "Please reduce your prompt; or completion length."
            )
            return _error(400, message, "invalid_request_error")
    return None


def embedding_rejection(body: Any, models: list[str], max_dims: int) -> web.Response | None:
    """Return the error OpenAI would answer an embeddings request with, or None if it is fine."""
    if not isinstance(body, dict):
        return _error(400, _bad_type("body", "an object", body), "invalid_request_error")
    problem: str | None = None
    param = "model"
    model = body.get("model")
    if model is None:
        problem = "Missing required parameter: 'model'."
    elif not isinstance(model, str):
        problem = _bad_type("model", "a string", model)
    else:
        param, problem = _embedding_params_problem(body, max_dims)
    if problem is not None:
        return _error(400, problem, "invalid_request_error", param=param)
    if model not in models:
        message = f"The model `{model}` does not exist or you do not have access to it."
        return _error(404, message, "invalid_request_error", code="model_not_found")
    return None


def _embedding_params_problem(body: dict[str, Any], max_dims: int) -> tuple[str, str | None]:
    """Return the parameter and the problem with an embeddings request's `input` and options."""
    if body.get("input") is None:
        return "input", "Missing required parameter: 'input'."
    inputs = _embedding_inputs(body["input"])
    if inputs is None:
        return "input", INVALID_INPUT
    if len(inputs) > MAX_EMBEDDING_INPUTS:
        return "input", (
            "Invalid 'input': array too long. Expected an array with maximum length "
            f"{MAX_EMBEDDING_INPUTS}, but got an array with length {len(inputs)} instead."
        )
    fmt = body.get("encoding_format")
    if fmt is not None and not isinstance(fmt, str):
        return "encoding_format", _bad_type("encoding_format", "a string", fmt)
    if fmt is not None and fmt not in EMBEDDING_FORMATS:
        return "encoding_format", (
            f"Invalid value: '{fmt}'. Supported values are: 'float' and 'base64'."
        )
    dims = body.get("dimensions")
    if dims is None:
        return "dimensions", None
    if not _is_token(dims):
        return "dimensions", _bad_type("dimensions", "an integer", dims)
    if dims < 1:
        return "dimensions", (
            "Invalid 'dimensions': integer below minimum value. "
            f"Expected a value >= 1, but got {dims} instead."
        )
    if dims > max_dims:
        return "dimensions", (
            "Invalid 'dimensions': integer above maximum value. "
            f"Expected a value <= {max_dims}, but got {dims} instead."
        )
    return "dimensions", None


def main(argv: list[str] | None = None) -> None:
    """Run the fake server as a standalone process until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--reply", default=None, help="fixed reply text (default: echo)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument(
        "--stream-delay", type=float, default=0.0, help="seconds between streamed chunks"
    )
    parser.add_argument("--stream-words", action="store_true", help="stream one word per chunk")
    parser.add_argument(
        "--no-structured-output",
        action="store_true",
        help="reject response_format of type json_schema like an older server",
    )
    parser.add_argument(
        "--structured-output-mode",
        choices=list(STRUCTURED_OUTPUT_MODES),
        default="json_schema",
        help="the response_format types known (json_object: like llama-cpp-python)",
    )
    parser.add_argument(
        "--ignore-max-completion-tokens",
        action="store_true",
        help="ignore max_completion_tokens (honour only max_tokens) like llama.cpp's server",
    )
    parser.add_argument(
        "--slots", type=int, default=0, help="serve this many requests at a time (0: any)"
    )
    parser.add_argument(
        "--token-seconds", type=float, default=0.0, help="seconds to write one output token"
    )
    args = parser.parse_args(argv)
    server = FakeOpenAI(args.host, args.port)
    server.slots = args.slots
    server.token_seconds = args.token_seconds
    if args.reply is not None:
        server.default_reply = args.reply
    server.delay = args.delay
    server.stream_delay = args.stream_delay
    server.stream_words = args.stream_words
    server.supports_structured_output = not args.no_structured_output
    server.structured_output_mode = args.structured_output_mode
    server.honours_max_completion_tokens = not args.ignore_max_completion_tokens
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with server:
        print(f"READY {server.base_url}", flush=True)  # noqa: T201
        while not done.wait(0.5):
            pass


if __name__ == "__main__":
    main()
