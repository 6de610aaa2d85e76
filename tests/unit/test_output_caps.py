"""Which request field caps a reply on which endpoint (LLM_TOKEN_LIMIT_PARAM)."""

from __future__ import annotations

import pytest

from src.config import ConfigError, Settings, load_settings


@pytest.mark.parametrize(
    ("base_url", "setting", "expected"),
    [
        (None, "auto", "max_completion_tokens"),
        ("https://api.openai.com/v1", "auto", "max_completion_tokens"),
        ("http://127.0.0.1:8080/v1", "auto", "max_tokens"),
        ("http://127.0.0.1:11434/v1", "auto", "max_tokens"),
        ("https://openrouter.ai/api/v1", "auto", "max_tokens"),
        ("http://127.0.0.1:8080/v1", "max_completion_tokens", "max_completion_tokens"),
        (None, "max_tokens", "max_tokens"),
    ],
)
def test_token_limit_param(base_url: str | None, setting: str, expected: str) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, openai_base_url=base_url, llm_token_limit_param=setting
    )
    assert settings.token_limit_param == expected


def test_token_limit_param_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_TOKEN_LIMIT_PARAM", "max_tokens")
    assert load_settings(_env_file=None).token_limit_param == "max_tokens"
    monkeypatch.setenv("LLM_TOKEN_LIMIT_PARAM", "max_output_tokens")
    with pytest.raises(ConfigError, match="LLM_TOKEN_LIMIT_PARAM"):
        load_settings(_env_file=None)
