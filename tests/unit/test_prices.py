"""Model prices: the built-in defaults, MODEL_PRICES over them, and how names are matched."""

from __future__ import annotations

import pytest

from src.config import Settings
from src.services.prices import DEFAULT_MODEL_PRICES, call_cost, price_of


def settings(**overrides: object) -> Settings:
    return Settings(_env_file=None, **overrides)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("openai/gpt-4o-mini", "gpt-4o-mini"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("openai/gpt-4.1-mini-2025-04-14", "gpt-4.1-mini"),
        ("anthropic/claude-sonnet-4", "anthropic/claude-sonnet-4"),
        ("o4-mini", "o4-mini"),
        ("gpt-5-nano", "gpt-5-nano"),
    ],
)
def test_common_models_have_a_price(name: str, expected: str) -> None:
    assert price_of(name, settings()) == DEFAULT_MODEL_PRICES[expected]


def test_model_prices_override_and_add() -> None:
    s = settings(model_prices={"gpt-4o": {"input": 1, "output": 2}, "local": {"input": 0}})
    override = price_of("gpt-4o", s)
    assert override is not None and override.input == 1
    assert price_of("local", s) is not None and price_of("unknown-model", s) is None
    assert price_of("gpt-4o-mini", s) == DEFAULT_MODEL_PRICES["gpt-4o-mini"]


def test_cost_of_tokens_cached_tokens_and_minutes() -> None:
    row = {
        "model": "gpt-4o",
        "input_tokens": 1_000_000,
        "cached_tokens": 400_000,
        "output_tokens": 100_000,
        "audio_seconds": None,
    }
    assert call_cost(row, settings()) == pytest.approx(0.6 * 2.5 + 0.4 * 1.25 + 0.1 * 10)
    voice = {
        "model": "whisper-1",
        "input_tokens": 0,
        "cached_tokens": 0,
        "output_tokens": 0,
        "audio_seconds": 90,
    }
    assert call_cost(voice, settings()) == pytest.approx(1.5 * 0.006)
