"""The model server the turn bench talks to: tests' FakeOpenAI in its own process.

It answers instantly with a fixed, realistic-length reply and records, per request, the
model name, the server's own handling time, when the request came and its first content
went out (`time.time()`), and the messages it was sent; the bench collects and clears that
record with `GET /bench/take`. A separate process keeps the server off the bench's event
loop and GIL, as a real remote model would be.

    python -m bench.model_server [--port 0] [--delay 0]    # prints `READY <base_url>`
        [--stream-delay 0] [--stream-words] [--words 0]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Self

import httpx

ROOT = Path(__file__).resolve().parent.parent

# About 400 characters, as a chat assistant's typical answer.
REPLY = (
    "Хороший вопрос. Если коротко: начните с малого и двигайтесь по шагам. Сначала "
    "запишите, что именно хотите получить к концу недели, затем разбейте это на три-четыре "
    "задачи, каждая не дольше часа. Утром берите самую неприятную, пока свежая голова. "
    "Вечером отметьте, что сделано, и перенесите остальное без чувства вины. Через неделю "
    "посмотрите, что сработало, а что нет, и поправьте план. Хотите, помогу составить его?"
)

# What the summary model answers: a running summary, or typed facts when asked for JSON.
SUMMARY_MODEL = "bench-summary"
SUMMARY = (
    "Пользователь планирует неделю: работа, спортзал три раза, английский по вечерам. "
    "Тренировки решили перенести на утро; во вторник поздняя встреча. Любит короткие ответы."
)
FACTS = json.dumps(
    [
        {"key": "workout_schedule", "value": "спортзал 3 раза в неделю, утром", "type": "fact"},
        {"key": "answer_style", "value": "коротко, списками", "type": "preference"},
    ],
    ensure_ascii=False,
)


def words_reply(words: int) -> str:
    """Return a reply of `words` words: REPLY's, over again as often as needed."""
    pool = REPLY.split()
    return " ".join(pool[i % len(pool)] for i in range(words))


def bench_reply(body: dict[str, Any], reply: str = REPLY) -> str:
    """Answer the chat model with `reply`; the summary model with a summary or facts."""
    if body.get("model") != SUMMARY_MODEL:
        return reply
    system = " ".join(
        str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system"
    )
    return FACTS if "JSON" in system.upper() else SUMMARY


def _import_fake() -> Any:
    """Import tests' FakeOpenAI; `tests` is importable from the repository root only."""
    try:
        from tests.fakes import openai_server
    except ModuleNotFoundError:
        sys.path.insert(0, str(ROOT))
        from tests.fakes import openai_server
    return openai_server


def make_server(host: str = "127.0.0.1", port: int = 0, reply: str = REPLY) -> Any:
    """Return a FakeOpenAI that also serves `GET /bench/take`; the chat model says `reply`."""
    fake = _import_fake()
    from aiohttp import web

    class BenchModelServer(fake.FakeOpenAI):  # type: ignore[misc, name-defined]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.default_reply = functools.partial(bench_reply, reply=reply)
            self.log: list[dict[str, Any]] = []

        def _build_app(self) -> web.Application:
            app = super()._build_app()
            app.router.add_get("/bench/take", self._take)
            return app

        async def _chat(self, request: web.Request) -> web.StreamResponse:
            started = time.perf_counter()
            try:
                return await super()._chat(request)
            finally:
                seconds = time.perf_counter() - started
                try:
                    body = json.loads(await request.read())  # aiohttp caches the body
                except ValueError:
                    body = {}
                entry = {
                    "model": body.get("model"),
                    "seconds": seconds,
                    "messages": [fake.message_text(m) for m in body.get("messages", [])],
                    **request.get(fake.TIMING, {}),
                }
                with self._lock:
                    self.log.append(entry)
                    # Nothing else reads them: keep the process's memory flat.
                    self.requests.clear()
                    self.request_times.clear()
                    self.timings.clear()

        async def _take(self, request: web.Request) -> web.Response:
            with self._lock:
                log, self.log = self.log, []
            return web.json_response(log)

    return BenchModelServer(host, port)


class ModelServerProcess:
    """Run the bench model server in a child process; `take()` its request log."""

    def __init__(
        self,
        delay: float = 0.0,
        stream_delay: float = 0.0,
        stream_words: bool = False,
        words: int = 0,
    ) -> None:
        self.delay = delay  # seconds every answer waits, as a remote model's latency
        self.stream_delay = stream_delay  # seconds between a stream's chunks
        self.stream_words = stream_words  # a chunk per word (else 16 characters)
        self.words = words  # the chat model's reply in words (0: REPLY)
        self.base_url = ""
        self._proc: subprocess.Popen[str] | None = None
        self._client: httpx.AsyncClient | None = None

    def start(self) -> Self:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        command = [sys.executable, "-m", "bench.model_server", "--delay", str(self.delay)]
        if self.stream_delay:
            command += ["--stream-delay", str(self.stream_delay)]
        if self.stream_words:
            command.append("--stream-words")
        if self.words:
            command += ["--words", str(self.words)]
        self._proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"the bench model server did not start: {line!r}")
        self.base_url = line.split(" ", 1)[1]
        return self

    async def take(self) -> list[dict[str, Any]]:
        """Return (and clear) what the server handled since the last call."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=30)
        response = await self._client.get(self.base_url.removesuffix("/v1") + "/bench/take")
        response.raise_for_status()
        return list(response.json())

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument(
        "--stream-delay", type=float, default=0.0, help="seconds between streamed chunks"
    )
    parser.add_argument("--stream-words", action="store_true", help="stream one word per chunk")
    parser.add_argument("--words", type=int, default=0, help="chat reply in words (0: REPLY)")
    args = parser.parse_args(argv)
    server = make_server(args.host, args.port, words_reply(args.words) if args.words else REPLY)
    server.delay = args.delay
    server.stream_delay = args.stream_delay
    server.stream_words = args.stream_words
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with server:
        print(f"READY {server.base_url}", flush=True)
        while not done.wait(0.5):
            pass


if __name__ == "__main__":
    main()
