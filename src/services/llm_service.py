"""Chat models from settings: any OpenAI-compatible endpoint through ChatOpenAI."""

from __future__ import annotations

from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from src.config import ConfigError, Settings


def model_configured(settings: Settings) -> bool:
    """Tell whether an endpoint is configured (a key, or a base URL for local servers)."""
    return settings.openai_api_key is not None or bool(settings.openai_base_url)


def make_chat_model(
    settings: Settings, model: str | None = None, temperature: float | None = None
) -> ChatOpenAI:
    """Return a ChatOpenAI for `model` (default LLM_MODEL) on the configured endpoint."""
    if not model_configured(settings):
        raise ConfigError(
            "no model endpoint configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for "
            "OpenRouter, Ollama, vLLM or llama.cpp server)"
        )
    # Local servers (Ollama, llama.cpp) need no key, but the client insists on one.
    key = settings.openai_api_key or SecretStr("not-needed")
    return ChatOpenAI(
        model=model or settings.llm_model,
        api_key=key,
        base_url=settings.openai_base_url,
        timeout=settings.llm_timeout,
        max_retries=settings.llm_max_retries,
        max_completion_tokens=settings.llm_max_output_tokens,
        temperature=settings.llm_temperature if temperature is None else temperature,
    )


def make_summary_model(settings: Settings) -> ChatOpenAI:
    """Return the (cheaper) model that writes summaries and extracts facts."""
    return make_chat_model(settings, settings.effective_summary_model, temperature=0)


def make_compact_model(settings: Settings) -> ChatOpenAI:
    """Return the cheap model that compacts finished sessions (seed 001)."""
    return make_chat_model(settings, settings.effective_compact_model, temperature=0)
