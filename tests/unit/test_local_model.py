"""Local model discovery's choices and the terminal's language, without any server."""

from __future__ import annotations

import pytest

from src.graph.lang import terminal_lang
from src.services.local_model import CANDIDATES, CANDIDATES_ENV, candidates, choose_model


def test_choose_model_prefers_the_configured_one_and_skips_embedders() -> None:
    assert choose_model(["llama3.2", "gpt-4o-mini"], "gpt-4o-mini") == "gpt-4o-mini"
    assert choose_model(["nomic-embed-text", "qwen2.5:7b"], "gpt-4o-mini") == "qwen2.5:7b"
    assert choose_model(["nomic-embed-text"], "gpt-4o-mini") is None


def test_candidates_are_ollama_then_llama_cpp_unless_overridden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(CANDIDATES_ENV, raising=False)
    assert [url for _, url in candidates()] == [url for _, url in CANDIDATES]
    assert [url for _, url in CANDIDATES] == [
        "http://127.0.0.1:11434/v1",
        "http://127.0.0.1:8080/v1",
    ]
    monkeypatch.setenv(CANDIDATES_ENV, "http://a/v1, http://b/v1")
    assert [url for _, url in candidates()] == ["http://a/v1", "http://b/v1"]


@pytest.mark.parametrize(
    ("env", "lang"),
    [
        ({"LANG": "ru_RU.UTF-8"}, "ru"),
        ({"LANG": "en_GB.UTF-8"}, "en"),
        ({"LANG": "de_DE.UTF-8"}, "en"),
        ({}, "en"),
        ({"LANG": "ru_RU.UTF-8", "LC_ALL": "C.UTF-8"}, "en"),
        ({"LANG": "C", "LC_MESSAGES": "ru_RU.UTF-8"}, "ru"),
    ],
)
def test_terminal_lang(env: dict[str, str], lang: str) -> None:
    assert terminal_lang(env) == lang
