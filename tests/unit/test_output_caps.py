"""Output caps: which request field carries them (LLM_TOKEN_LIMIT_PARAM), capped copies."""

from __future__ import annotations

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from src.config import ConfigError, Settings, load_settings
from src.graph.output_caps import was_cut, with_output_cap
from src.services.llm_service import CompatibleChatOpenAI, make_chat_model


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


def test_with_output_cap_copies_the_model() -> None:
    settings = Settings(_env_file=None, openai_base_url="http://127.0.0.1:1/v1")  # type: ignore[call-arg]
    model = make_chat_model(settings)
    capped = with_output_cap(model, 200)
    assert capped.max_tokens == 200 and model.max_tokens == settings.llm_max_output_tokens
    assert isinstance(capped, CompatibleChatOpenAI) and capped.token_limit_param == "max_tokens"
    assert capped.root_async_client is model.root_async_client  # one HTTP client
    fake = GenericFakeChatModel(messages=iter([]))
    assert with_output_cap(fake, 200) is fake  # nothing to cap


def test_was_cut() -> None:
    assert was_cut(AIMessage("x", response_metadata={"finish_reason": "length"}))
    assert not was_cut(AIMessage("x", response_metadata={"finish_reason": "stop"}))
    assert not was_cut(AIMessage("x"))


def test_messages_and_tools_travel_as_ready_json() -> None:
    """The OpenAI client gets empty messages (nothing to walk) and the real ones, with the
    tools, in extra_body; a structured-output request keeps them as arguments."""
    settings = Settings(_env_file=None, openai_base_url="http://127.0.0.1:1/v1")  # type: ignore[call-arg]
    model = make_chat_model(settings)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    bound = model.bind_tools([tool])
    payload = model._get_request_payload("hi", **bound.kwargs)  # type: ignore[attr-defined]
    assert payload["messages"] == [] and "tools" not in payload
    assert payload["extra_body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert payload["extra_body"]["tools"][0]["function"]["name"] == "f"
    assert payload["max_tokens"] == settings.llm_max_output_tokens
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    structured = model._get_request_payload("hi", response_format=schema)
    assert structured["messages"] == [{"role": "user", "content": "hi"}]
    assert "messages" not in (structured.get("extra_body") or {})


@pytest.mark.parametrize("name", ["gpt-4o-mini", "o3-mini"])
def test_text_messages_are_written_as_chatopenai_writes_them(name: str) -> None:
    """The fast path for text messages sends exactly what ChatOpenAI's own conversion
    sends, key order included (a prompt cache compares bytes); anything else (tool
    calls, tool results, names, images, provider fields) goes through ChatOpenAI's."""
    settings = Settings(_env_file=None, openai_base_url="http://127.0.0.1:1/v1")  # type: ignore[call-arg]
    ours = make_chat_model(settings, name)
    theirs = ChatOpenAI(model=name, api_key=SecretStr("x"), base_url="http://127.0.0.1:1/v1")
    call = {"id": "c1", "name": "search_history", "args": {"query": "tea"}}
    conversations: list[list[BaseMessage]] = [
        [
            SystemMessage("You are helpful."),
            HumanMessage("[1] User: Привет"),
            AIMessage("[2] Assistant: Здравствуйте! " * 30),
            HumanMessage(""),
        ],
        [
            SystemMessage("sys"),
            HumanMessage("find tea"),
            AIMessage("", tool_calls=[call]),
            ToolMessage("found 2", tool_call_id="c1", name="search_history"),
            AIMessage("done", additional_kwargs={"refusal": None}),
            HumanMessage("named", name="bob"),
            HumanMessage([{"type": "text", "text": "a photo"}]),
        ],
    ]
    for messages in conversations:
        sent = ours._get_request_payload(messages)["extra_body"]["messages"]
        expected = theirs._get_request_payload(messages)["messages"]
        assert [list(m.items()) for m in sent] == [list(m.items()) for m in expected]
    assert (ours._get_request_payload(conversations[0])["extra_body"]["messages"][0]["role"]) == (
        "developer" if name.startswith("o") else "system"
    )
