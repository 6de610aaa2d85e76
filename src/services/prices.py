"""What model calls cost: MODEL_PRICES over the defaults below, and a row's cost.

Prices are US dollars per million tokens (and per minute of transcribed audio), as the
providers listed them in 2025; MODEL_PRICES overrides or adds models one by one. A model
is looked up by its name, then without a provider's prefix (`openai/gpt-4o` is `gpt-4o`),
then without a snapshot date (`gpt-4o-2024-08-06` is `gpt-4o`).
"""

from __future__ import annotations

import re
from typing import Any

from src.config import ModelPrice, Settings


def _p(
    input: float, output: float, cached: float | None = None, audio_minute: float = 0.0
) -> ModelPrice:
    return ModelPrice(input=input, output=output, cached_input=cached, audio_minute=audio_minute)


DEFAULT_MODEL_PRICES: dict[str, ModelPrice] = {
    # OpenAI (platform.openai.com/docs/pricing)
    "gpt-4o": _p(2.50, 10.00, 1.25),
    "gpt-4o-mini": _p(0.15, 0.60, 0.075),
    "gpt-4.1": _p(2.00, 8.00, 0.50),
    "gpt-4.1-mini": _p(0.40, 1.60, 0.10),
    "gpt-4.1-nano": _p(0.10, 0.40, 0.025),
    "gpt-5": _p(1.25, 10.00, 0.125),
    "gpt-5-mini": _p(0.25, 2.00, 0.025),
    "gpt-5-nano": _p(0.05, 0.40, 0.005),
    "gpt-5-chat-latest": _p(1.25, 10.00, 0.125),
    "o3": _p(2.00, 8.00, 0.50),
    "o3-mini": _p(1.10, 4.40, 0.55),
    "o4-mini": _p(1.10, 4.40, 0.275),
    "text-embedding-3-small": _p(0.02, 0.0),
    "text-embedding-3-large": _p(0.13, 0.0),
    "whisper-1": _p(0.0, 0.0, audio_minute=0.006),
    "gpt-4o-transcribe": _p(0.0, 0.0, audio_minute=0.006),
    "gpt-4o-mini-transcribe": _p(0.0, 0.0, audio_minute=0.003),
    # Anthropic through OpenRouter (openrouter.ai/anthropic)
    "anthropic/claude-3.5-haiku": _p(0.80, 4.00, 0.08),
    "anthropic/claude-haiku-4.5": _p(1.00, 5.00, 0.10),
    "anthropic/claude-3.5-sonnet": _p(3.00, 15.00, 0.30),
    "anthropic/claude-3.7-sonnet": _p(3.00, 15.00, 0.30),
    "anthropic/claude-sonnet-4": _p(3.00, 15.00, 0.30),
    "anthropic/claude-sonnet-4.5": _p(3.00, 15.00, 0.30),
    "anthropic/claude-opus-4": _p(15.00, 75.00, 1.50),
    "anthropic/claude-opus-4.1": _p(15.00, 75.00, 1.50),
    # Groq's speech to text (groq.com/pricing: per hour of audio)
    "whisper-large-v3": _p(0.0, 0.0, audio_minute=0.111 / 60),
    "whisper-large-v3-turbo": _p(0.0, 0.0, audio_minute=0.04 / 60),
}
_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def price_of(model: str, settings: Settings) -> ModelPrice | None:
    """Return the model's price (MODEL_PRICES, else the defaults), or None when unknown."""
    names = [model]
    if "/" in model and not model.startswith("anthropic/"):
        names.append(model.split("/", 1)[1])
    names += [_SNAPSHOT.sub("", name) for name in names if _SNAPSHOT.search(name)]
    for prices in (settings.model_prices, DEFAULT_MODEL_PRICES):
        for name in names:
            if name in prices:
                return prices[name]
    return None


def call_cost(row: dict[str, Any], settings: Settings) -> float | None:
    """Return the estimated cost in USD of a row of sums (one model), or None when the
    model has no price."""
    price = price_of(str(row["model"]), settings)
    if price is None:
        return None
    cached = int(row["cached_tokens"] or 0)
    fresh = max(0, int(row["input_tokens"] or 0) - cached)
    cached_price = price.input if price.cached_input is None else price.cached_input
    output = int(row["output_tokens"] or 0)
    tokens = fresh * price.input + cached * cached_price + output * price.output
    minutes = float(row.get("audio_seconds") or 0) / 60
    return tokens / 1_000_000 + minutes * price.audio_minute
