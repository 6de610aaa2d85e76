"""Token counting: the per-language approximation, exact tiktoken, and no network offline."""

from __future__ import annotations

import hashlib
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from src.graph import tokens
from src.graph.tokens import (
    PER_MESSAGE_OVERHEAD,
    ApproxCounter,
    TiktokenCounter,
    count_messages,
    count_tools,
    is_cached,
    make_counter,
)


@pytest.fixture(autouse=True)
def fresh_counters() -> Iterator[None]:
    make_counter.cache_clear()
    yield
    make_counter.cache_clear()


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any attempt to reach the network fail the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_approx_costs_more_for_cyrillic() -> None:
    c = ApproxCounter()
    assert c.count("") == 0
    english = "The quick brown fox jumps over the lazy dog"
    russian = "Съешь же ещё этих мягких французских булок"
    assert len(russian) == len(english) - 1
    assert c.count(russian) > c.count(english)
    # Seed 002: English ~1.33 tokens a word, Russian ~2.
    assert 9 <= c.count(english) <= 13
    assert 14 <= c.count(russian) <= 20


def test_approx_numbers_punctuation_and_other_scripts() -> None:
    c = ApproxCounter()
    assert c.count("123456789") == 3
    assert c.count("...") == 2
    assert c.count("你好世界") == 4
    assert c.count("a\n\nb") == 3
    assert c.count("   ") == 1  # never 0 for a non-empty text


@given(st.text(max_size=300), st.text(max_size=300))
def test_approx_is_nearly_additive(a: str, b: str) -> None:
    c = ApproxCounter()
    assert c.count(a + b) <= c.count(a) + c.count(b) + 1
    assert c.count(a + b) >= max(c.count(a), c.count(b)) // 2


def test_tiktoken_counter_counts_encoded_tokens() -> None:
    # A byte-level encoding built in memory: no file, no download.
    encoding = tiktoken.Encoding(
        name="bytes",
        pat_str=r"\S+|\s+",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )
    counter = TiktokenCounter(encoding)
    assert counter.name == "tiktoken:bytes"
    assert counter.count("") == 0
    assert counter.count("abc") == 3
    assert counter.count("Ж") == 2  # two UTF-8 bytes
    assert counter.count("<|endoftext|>") == len("<|endoftext|>")


def test_auto_without_cached_encoding_is_approximate_and_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: None
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    counter = make_counter("gpt-4o-mini", "auto")
    assert isinstance(counter, ApproxCounter)
    assert counter.count("привет, мир") > 0


def test_empty_cache_dir_means_no_cache(monkeypatch: pytest.MonkeyPatch, offline: None) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert not is_cached("cl100k_base")
    assert isinstance(make_counter("gpt-3.5-turbo", "auto"), ApproxCounter)


def test_tiktoken_mode_falls_back_when_the_download_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))

    def no_network(path: str) -> bytes:
        raise ConnectionError("offline")

    monkeypatch.setattr("tiktoken.load.read_file", no_network)
    with caplog.at_level(logging.WARNING, logger="src.graph.tokens"):
        counter = make_counter("gpt-4o-mini-fallback-test", "tiktoken")
    assert isinstance(counter, ApproxCounter)
    assert "counting tokens approximately" in caplog.text


def test_approx_mode_never_looks_for_tiktoken(
    monkeypatch: pytest.MonkeyPatch, offline: None
) -> None:
    monkeypatch.setattr(tokens, "is_cached", lambda name: pytest.fail("looked for tiktoken"))
    assert isinstance(make_counter("gpt-4o", "approx"), ApproxCounter)


def test_counter_in_use_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="src.graph.tokens"):
        first = make_counter("some-local-model", "approx")
        second = make_counter("some-local-model", "approx")
    assert first is second
    assert caplog.text.count("token counter for some-local-model: approximate") == 1


def _fake_constructor() -> dict[str, Any]:
    # Its constants are what `is_cached` reads: the blob URL and the expected sha256.
    url = "https://example.invalid/encodings/fake.tiktoken"
    expected = "3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7"
    return {"url": url, "hash": expected}


def test_is_cached_checks_the_file_and_its_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiktoken_ext import openai_public

    monkeypatch.setitem(openai_public.ENCODING_CONSTRUCTORS, "fake_enc", _fake_constructor)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    url = "https://example.invalid/encodings/fake.tiktoken"
    path = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    assert not is_cached("fake_enc")
    path.write_bytes(b"corrupt")
    assert not is_cached("fake_enc")  # tiktoken would throw it away and download again
    path.write_bytes(b"data")
    assert hashlib.sha256(b"data").hexdigest() == _fake_constructor()["hash"]
    assert is_cached("fake_enc")
    assert not is_cached("no_such_encoding")


def test_count_messages_adds_overhead_and_tool_calls() -> None:
    c = ApproxCounter()
    plain = [HumanMessage("hello"), AIMessage("hi")]
    assert count_messages(plain, c) == c.count("hello") + c.count("hi") + 2 * PER_MESSAGE_OVERHEAD
    call = AIMessage("", tool_calls=[{"name": "search_history", "args": {"q": "x"}, "id": "1"}])
    assert count_messages([call], c) > PER_MESSAGE_OVERHEAD + 3


def test_tool_schemas_are_counted() -> None:
    from langchain_core.tools import tool

    @tool
    def short(query: str) -> str:
        """Find."""
        return query

    @tool
    def documented(query: str, limit: int = 10) -> str:
        """Search everything the user said, including parts no longer in the context.

        Args:
            query: words to look for, in any language.
            limit: how many messages to return at most.
        """
        return query

    c = ApproxCounter()
    assert 0 < count_tools([short], c) < count_tools([documented], c)
    assert count_tools([short, documented], c) == count_tools([short], c) + count_tools(
        [documented], c
    )
    assert count_tools([], c) == 0
