"""The real window of a local model, found by itself: asked of the server where it says it
(llama.cpp, vLLM, Ollama), else learned from the first request it refuses (llama-cpp-python,
streamed or not); every turn then answered within it, the memory invariant kept on every
request; a window too small for even the system prompt, an unknown model and a refused key
said with their fix. Real PostgreSQL, the real `ChatOpenAI` client against the fake server
playing each server (tests/fakes/openai_windows.py)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from src.graph import prompts
from src.model_windows import WindowBook
from src.services.agent_service import Identity, TurnStream
from src.services.window_probe import probe
from tests.fakes.memory_model import MEMORY_MODEL
from tests.fakes.openai_server import message_text
from tests.fakes.openai_windows import prompt_tokens
from tests.fakes.openai_windows import reply_cap as cap
from tests.integration.test_memory_every_request import missing_at_each_request
from tests.memory_ledger import Ledger

OWNERS = itertools.count(7_900_000)
CHAT = "gpt-4o-mini"
FILLER = "The weather was fine and we walked along the river for a while. " * 10


def chat_requests(llm: Any) -> list[dict[str, Any]]:
    return [
        r for r in llm.requests if message_text(r["messages"][0]).startswith(prompts.SYSTEM_PROMPT)
    ]


@pytest.mark.parametrize(
    ("flavour", "source"), [("llama.cpp", "props"), ("vllm", "models"), ("ollama", "ollama")]
)
def test_the_server_says_its_window(llm: Any, flavour: str, source: str) -> None:
    llm.flavour, llm.window = flavour, 3000
    found = probe(llm.base_url, CHAT)
    assert found is not None and (found.tokens, found.source) == (3000, source)


@pytest.mark.parametrize("flavour", ["openai", "llama-cpp-python"])
def test_a_server_that_does_not_say_is_no_error(llm: Any, flavour: str) -> None:
    llm.flavour, llm.window = flavour, 3000
    assert probe(llm.base_url, CHAT) is None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flavour", "stream"),
    [
        ("llama-cpp-python", True),
        ("llama-cpp-python", False),
        ("llama.cpp", True),
        ("vllm", False),
        ("ollama", True),
    ],
)
async def test_every_turn_is_answered_within_the_window(
    runtime_factory: Any, llm: Any, tmp_path: Path, flavour: str, stream: bool
) -> None:
    window = 4096
    llm.flavour, llm.window = flavour, window
    ledger = Ledger()
    llm.default_for(MEMORY_MODEL, ledger.reply)
    llm.default_reply = "ok, noted."
    rt = await runtime_factory(tgagent_data_dir=tmp_path, max_context=30, summary_trigger=4)
    who = Identity(next(OWNERS), "p", "P", "en")
    for i in range(1, 21):
        watch = TurnStream(lambda text: None, lambda names: None) if stream else None
        result = await rt.service.handle_message(who, f"u{i} {FILLER}", stream=watch)
        assert result.ok, result.reply
        await rt.service.drain()
    chats = chat_requests(llm)
    vllm = flavour == "vllm"
    refused = [i for i, r in enumerate(chats) if prompt_tokens(r) + (vllm and cap(r)) >= window]
    said = sum(len(f"u{i} {FILLER}") for i in range(1, 21)) // 4
    outgrew = prompt_tokens(chats[0]) + said > window
    assert outgrew, "the conversation never outgrew the window: the test tests nothing"
    if flavour == "llama-cpp-python":
        # Refused once (streamed: then asked again whole), then planned within.
        assert refused and len(refused) <= 2
        assert refused == list(range(refused[0], refused[0] + len(refused)))
    else:
        assert refused == []  # the server said its window: never refused
    assert llm.truncated == []  # nor cut silently, as Ollama does
    assert rt.settings.window(CHAT).tokens == window
    assert missing_at_each_request(llm, ledger) == []
    if flavour == "llama-cpp-python":
        assert rt.settings.window(CHAT).source == "error"
        # Remembered across restarts.
        known = WindowBook.in_dir(tmp_path).get(llm.base_url, CHAT)
        assert known is not None and known.tokens == window


async def test_a_window_too_small_for_the_system_prompt_is_said_with_its_fix(
    runtime_factory: Any, llm: Any, tmp_path: Path
) -> None:
    llm.flavour, llm.window = "llama-cpp-python", 300
    rt = await runtime_factory(tgagent_data_dir=tmp_path)
    who = Identity(next(OWNERS), "p", "P", "en")
    result = await rt.service.handle_message(who, "hello")
    assert not result.ok
    assert "300 tokens" in result.reply and "--n_ctx" in result.reply
    assert "try again" not in result.reply
    asked = len(chat_requests(llm))
    again = await rt.service.handle_message(who, "hello again")
    assert not again.ok and "300 tokens" in again.reply
    assert len(chat_requests(llm)) == asked  # known now: said without asking the model again


@pytest.mark.parametrize(
    ("status", "said"),
    [(404, "does not know the model"), (401, "refused access"), (403, "refused access")],
)
async def test_failures_waiting_cannot_fix_say_their_fix(
    runtime_factory: Any, llm: Any, tmp_path: Path, status: int, said: str
) -> None:
    rt = await runtime_factory(tgagent_data_dir=tmp_path)
    llm.fail_next(1, status=status)
    result = await rt.service.handle_message(Identity(next(OWNERS), "p", "P", "en"), "hello")
    assert not result.ok and said in result.reply and "later" not in result.reply
    llm.fail_next(1, status=503)
    result = await rt.service.handle_message(Identity(next(OWNERS), "p", "P", "en"), "hello")
    assert not result.ok and "later" in result.reply


async def test_a_small_window_offers_the_tools_that_fit(
    runtime_factory: Any, llm: Any, tmp_path: Path
) -> None:
    """2,300 tokens of system prompt and ten tools' schemas do not fit a 2,400 window with
    a message: the first tools that fit a quarter of it are offered, and the turn fits."""
    llm.flavour, llm.window = "llama.cpp", 2400
    rt = await runtime_factory(tgagent_data_dir=tmp_path)
    result = await rt.service.handle_message(Identity(next(OWNERS), "p", "P", "en"), "hello")
    assert result.ok, result.reply
    [request] = chat_requests(llm)
    assert 0 < len(request["tools"]) < 10
    assert prompt_tokens(request) < 2400
