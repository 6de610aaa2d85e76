"""Prove the fake OpenAI and Telegram Bot API servers work with the real client libraries."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import telegram
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from pydantic import BaseModel
from telegram.error import BadRequest, Forbidden, InvalidToken, RetryAfter

from tests.fakes.bot_api_server import FakeBotAPI, compute_entities
from tests.fakes.openai_server import INVALID_INPUT, FakeOpenAI, Fault, fake_embedding

TOKEN = "123456:TEST-TOKEN"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def oai() -> Iterator[FakeOpenAI]:
    """Run one fake OpenAI server for the module."""
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture()
def srv(oai: FakeOpenAI) -> Iterator[FakeOpenAI]:
    """Hand out the shared fake OpenAI server in a clean state."""
    oai.reset()
    yield oai


def llm(srv: FakeOpenAI, **kw: object) -> ChatOpenAI:
    """Build a real ChatOpenAI client pointed at the fake server."""
    return ChatOpenAI(base_url=srv.base_url, api_key="test", max_retries=0, **kw)  # type: ignore[arg-type]


def make_bot(tg: FakeBotAPI, token: str = TOKEN) -> telegram.Bot:
    """Build a real PTB Bot pointed at the fake server."""
    return telegram.Bot(token, base_url=tg.base_url, base_file_url=tg.base_file_url)


@tool
def get_weather(city: str) -> str:
    """Return the weather for a city."""
    return "sunny"


def test_plain_and_default_reply(srv: FakeOpenAI) -> None:
    """Answer scripted text, then fall back to the echo default."""
    srv.script("hello from fake")
    model = llm(srv, model="gpt-4o-mini")
    assert model.invoke("hi").content == "hello from fake"
    reply = model.invoke([HumanMessage("what is the weather like today?")])
    assert reply.content == "ok: what is the weather like today?"
    assert reply.usage_metadata and reply.usage_metadata["input_tokens"] >= 1
    body = srv.last_request()
    assert body is not None and body["model"] == "gpt-4o-mini"
    assert body["messages"][-1] == {"role": "user", "content": "what is the weather like today?"}
    assert len(srv.requests) == 2 and len(srv.timings) == 2 and srv.handled_seconds >= 0


def test_tool_calls_and_callable(srv: FakeOpenAI) -> None:
    """Produce tool calls parsed by bind_tools, and dynamic replies from a callable."""
    srv.script(
        {"tool_calls": [{"name": "get_weather", "args": {"city": "Paris"}}]},
        lambda req: f"{len(req['messages'])} messages",
    )
    model = llm(srv).bind_tools([get_weather])
    msg = model.invoke("weather in Paris?")
    assert msg.tool_calls[0]["name"] == "get_weather"
    assert msg.tool_calls[0]["args"] == {"city": "Paris"}
    assert msg.tool_calls[0]["id"].startswith("call_")
    assert msg.response_metadata["finish_reason"] == "tool_calls"
    assert srv.requests[0]["tools"][0]["function"]["name"] == "get_weather"
    assert llm(srv).invoke("x").content == "1 messages"


def test_per_model_script(srv: FakeOpenAI) -> None:
    """Route scripted replies by model before the general queue."""
    srv.script("general")
    srv.script_for("cheap-model", "summary")
    assert llm(srv, model="cheap-model").invoke("a").content == "summary"
    assert llm(srv, model="gpt-4o-mini").invoke("b").content == "general"
    assert len(srv.requests_for("cheap-model")) == 1
    assert srv.pending_replies() == 0


def test_streaming(srv: FakeOpenAI) -> None:
    """Stream text and tool calls as SSE chunks ending with [DONE]."""
    srv.script("a streamed answer longer than one chunk", {"tool_calls": [{"name": "f"}]})
    model = llm(srv, streaming=True, stream_usage=True)
    msg = model.invoke("x")
    assert msg.content == "a streamed answer longer than one chunk"
    assert msg.usage_metadata and msg.usage_metadata["output_tokens"] > 0
    assert model.invoke("y").tool_calls[0]["name"] == "f"


def test_content_filter_answers_200_like_azure(srv: FakeOpenAI) -> None:
    """A content filter answers 200 with `finish_reason: "content_filter"`, its content empty
    or partial, whole or streamed; the SDK's structured parsing raises on it."""
    filtered = {"content": "", "finish_reason": "content_filter"}
    partial = {"content": "the first words before the filter", "finish_reason": "content_filter"}
    srv.script(filtered, partial, partial)
    model = llm(srv)
    empty = model.invoke("x")
    assert empty.content == "" and empty.response_metadata["finish_reason"] == "content_filter"
    cut = model.invoke("y")
    assert cut.content == partial["content"]
    assert cut.response_metadata["finish_reason"] == "content_filter"
    streamed = llm(srv, streaming=True).invoke("z")
    assert streamed.content == partial["content"]
    assert streamed.response_metadata["finish_reason"] == "content_filter"
    srv.script(filtered)
    client = openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0)
    with pytest.raises(openai.ContentFilterFinishReasonError):
        client.chat.completions.parse(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "json please"}],
            response_format={"type": "json_object"},
        )
    srv.script({"content": "x", "finish_reason": "filtered"})
    with pytest.raises(openai.InternalServerError):  # a finish reason OpenAI never sends
        model.invoke("w")


def test_structured_output_refusal(srv: FakeOpenAI) -> None:
    """A refusal comes as OpenAI's Structured Outputs send it: content null, `refusal` set,
    whole or streamed."""
    said = "I'm sorry, I can't help with that."
    srv.script(*[{"content": None, "refusal": said}] * 3)
    client = openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0)
    parsed = client.chat.completions.parse(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "json please"}],
        response_format={"type": "json_object"},
    )
    message = parsed.choices[0].message
    assert message.content is None and message.refusal == said
    assert parsed.choices[0].finish_reason == "stop"
    assert llm(srv).invoke("x").additional_kwargs["refusal"] == said
    chunks = list(
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "y"}], stream=True
        )
    )
    assert "".join(c.choices[0].delta.refusal or "" for c in chunks if c.choices) == said


def test_usage_cached_and_missing(srv: FakeOpenAI) -> None:
    """Report cached prompt tokens when asked; report no usage at all, streamed or not."""
    srv.cached_prompt_tokens = 3
    reply = llm(srv).invoke("a prompt long enough to have some tokens")
    assert reply.usage_metadata is not None
    assert reply.usage_metadata.get("input_token_details", {}).get("cache_read") == 3
    srv.reset()
    srv.reports_usage = False
    assert llm(srv).invoke("x").usage_metadata is None
    assert llm(srv, streaming=True, stream_usage=True).invoke("y").usage_metadata is None
    assert srv.requests[-1]["stream_options"] == {"include_usage": True}


LONG = "".join(f"word{i:03d} " for i in range(100))  # 800 characters, 200 fake tokens


def test_output_caps_honoured(srv: FakeOpenAI) -> None:
    """Cut a reply to max_completion_tokens or max_tokens and answer finish_reason length."""
    srv.default_reply = LONG
    capped = llm(srv, max_completion_tokens=10).invoke("x")
    assert capped.content == LONG[:40] and capped.response_metadata["finish_reason"] == "length"
    assert srv.last_request()["max_completion_tokens"] == 10  # type: ignore[index]
    assert capped.usage_metadata and capped.usage_metadata["output_tokens"] == 10
    whole = llm(srv, max_completion_tokens=500).invoke("x")
    assert whole.content == LONG and whole.response_metadata["finish_reason"] == "stop"
    streamed = llm(srv, max_completion_tokens=5, streaming=True).invoke("x")
    assert streamed.content == LONG[:20]
    assert streamed.response_metadata["finish_reason"] == "length"
    url = f"{srv.base_url}/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 3}
    (choice,) = httpx.post(url, json=body, timeout=5).json()["choices"]
    assert choice["message"]["content"] == LONG[:12] and choice["finish_reason"] == "length"
    both = body | {"max_completion_tokens": 4}
    assert (
        httpx.post(url, json=both, timeout=5).json()["choices"][0]["message"]["content"]
        == (LONG[:16])
    )


def test_capped_tool_calls_dropped(srv: FakeOpenAI) -> None:
    """Drop the tool calls that do not fit whole after the content."""
    call = {"name": "get_weather", "args": {"city": "Paris"}}
    srv.script({"content": "ok", "tool_calls": [call]}, {"content": "ok", "tool_calls": [call]})
    model = llm(srv, max_completion_tokens=3).bind_tools([get_weather])
    cut = model.invoke("x")
    assert cut.content == "ok" and not cut.tool_calls
    assert cut.response_metadata["finish_reason"] == "length"
    fits = llm(srv, max_completion_tokens=20).bind_tools([get_weather]).invoke("x")
    assert fits.tool_calls[0]["args"] == {"city": "Paris"}


def test_server_ignoring_max_completion_tokens(srv: FakeOpenAI) -> None:
    """Act like llama.cpp's server: ignore max_completion_tokens, honour max_tokens."""
    srv.default_reply = LONG
    srv.honours_max_completion_tokens = False
    ignored = llm(srv, max_completion_tokens=10).invoke("x")
    assert ignored.content == LONG and ignored.response_metadata["finish_reason"] == "stop"
    url = f"{srv.base_url}/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 10}
    assert httpx.post(url, json=body, timeout=5).json()["choices"][0]["finish_reason"] == "length"
    srv.reset()
    assert srv.honours_max_completion_tokens


@pytest.mark.parametrize(
    ("param", "value", "problem"),
    [
        ("max_tokens", 0, "Invalid 'max_tokens': integer below minimum value."),
        ("max_completion_tokens", "9", "Invalid type for 'max_completion_tokens'"),
        ("max_tokens", True, "expected an integer, but got a boolean"),
    ],
)
def test_invalid_output_cap_rejected(srv: FakeOpenAI, param: str, value: Any, problem: str) -> None:
    """Answer a cap that is not a positive integer with an OpenAI-style 400."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], param: value}
    rejected = httpx.post(f"{srv.base_url}/chat/completions", json=body, timeout=5)
    assert rejected.status_code == 400
    error = rejected.json()["error"]
    assert problem in error["message"] and error["param"] == param


def _call(call_id: str, name: str = "get_weather") -> dict[str, Any]:
    function = {"name": name, "arguments": '{"city": "Paris"}'}
    return {"id": call_id, "type": "function", "function": function}


USER = {"role": "user", "content": "weather?"}
ASKS = {"role": "assistant", "content": None, "tool_calls": [_call("c1"), _call("c2")]}
ASKS_ONE = {"role": "assistant", "content": None, "tool_calls": [_call("c1")]}
TOOL_1 = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
TOOL_2 = {"role": "tool", "tool_call_id": "c2", "content": "rainy"}
REPLY = {"role": "assistant", "content": "Sunny in Paris."}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
UNANSWERED = "must be followed by tool messages responding to each 'tool_call_id'"
ORPHAN = "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'"


@pytest.mark.parametrize(
    ("messages", "extra", "param", "problem"),
    [
        ([], {}, "messages", "empty array"),
        ([{"role": "bot", "content": "x"}], {}, "messages[0].role", "Invalid value: 'bot'"),
        ([{"content": "x"}], {}, "messages[0].role", "Missing required parameter"),
        ([{"role": "user"}], {}, "messages[0].content", "Missing required parameter"),
        ([USER, {"role": "assistant", "content": None}], {}, "messages[1].content", "got null"),
        ([USER, TOOL_1], {}, "messages.[1].role", ORPHAN),
        ([USER, REPLY, TOOL_1], {}, "messages.[2].role", ORPHAN),
        ([USER, ASKS_ONE, TOOL_1, TOOL_1], {}, "messages.[3].role", ORPHAN),
        ([USER, ASKS, TOOL_1, REPLY], {}, "messages.[3].role", UNANSWERED + ". The following"),
        ([USER, ASKS, TOOL_1], {}, "messages.[3].role", "did not have response messages: c2"),
        ([USER, ASKS_ONE, USER, TOOL_1], {}, "messages.[2].role", UNANSWERED),
        (
            [USER, {"role": "tool", "content": "sunny"}],
            {},
            "messages[1].tool_call_id",
            "Missing required parameter",
        ),
        (
            [USER, {"role": "assistant", "tool_calls": [{"type": "function"}]}],
            {},
            "messages[1].tool_calls[0].id",
            "Missing required parameter",
        ),
        ([USER], {"tool_choice": "auto"}, "tool_choice", "only allowed when 'tools'"),
    ],
)
def test_message_protocol_rejected(
    srv: FakeOpenAI, messages: list[Any], extra: dict[str, Any], param: str, problem: str
) -> None:
    """Reject a chat request that breaks OpenAI's message protocol with an OpenAI-style 400."""
    srv.fail_next(1, status=503)
    body = {"model": "m", "messages": messages, **extra}
    url = f"{srv.base_url}/chat/completions"
    rejected = httpx.post(url, json=body, timeout=5)
    assert rejected.status_code == 400
    error = rejected.json()["error"]
    assert problem in error["message"]
    assert error == {**openai_error(error["message"]), "param": param}
    assert srv.last_request() == body
    # A rejected request consumes no injected fault.
    assert httpx.post(url, json={"model": "m", "messages": [USER]}, timeout=5).status_code == 503


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "developer", "content": "be brief"}, USER],
        [{"role": "system", "content": "s"}, USER, ASKS, TOOL_2, TOOL_1, REPLY, USER],
        [USER, ASKS_ONE, TOOL_1],
        [USER, {"role": "user", "content": [{"type": "text", "text": "more"}]}],
    ],
)
def test_message_protocol_accepted(srv: FakeOpenAI, messages: list[Any]) -> None:
    """Accept valid histories, tool calls in the history without `tools` too (as OpenAI does)."""
    url = f"{srv.base_url}/chat/completions"
    for extra in ({}, {"tools": TOOLS}):
        answer = httpx.post(url, json={"model": "m", "messages": messages, **extra}, timeout=5)
        assert answer.status_code == 200, answer.text


def test_tool_round_trip_through_client(srv: FakeOpenAI) -> None:
    """Accept what ChatOpenAI sends for a tool round trip; reject a tool message it orphans."""
    srv.script({"tool_calls": [{"name": "get_weather", "args": {"city": "Paris"}}]}, "Sunny.")
    model = llm(srv).bind_tools([get_weather])
    question = HumanMessage("weather in Paris?")
    asked = model.invoke([question])
    result = get_weather.invoke(asked.tool_calls[0])
    assert model.invoke([question, asked, result]).content == "Sunny."
    with pytest.raises(openai.BadRequestError, match="preceeding message with 'tool_calls'"):
        model.invoke([question, result])


def test_faults(srv: FakeOpenAI) -> None:
    """Inject HTTP errors, malformed and empty bodies and dropped connections."""
    model = llm(srv)
    srv.script("after faults")
    srv.fail_next(1, status=500)
    with pytest.raises(openai.InternalServerError):
        model.invoke("x")
    srv.fail_next(1, status=429)
    with pytest.raises(openai.RateLimitError):
        model.invoke("x")
    srv.malformed_next(1)
    with pytest.raises(ValueError):
        model.invoke("x")
    srv.close_connection_next(1)
    with pytest.raises(openai.APIConnectionError):
        model.invoke("x")
    srv.empty_next(1)
    assert model.invoke("x").content == ""
    assert model.invoke("x").content == "after faults"


def test_delay_and_timeout(srv: FakeOpenAI) -> None:
    """Time out a client when the server delays, then answer promptly again."""
    srv.delay_next(1, 2.0)
    with pytest.raises(openai.APITimeoutError):
        llm(srv, timeout=0.2).invoke("slow")
    # The delay was for one request only: the next one is answered within a short timeout.
    assert llm(srv, timeout=2).invoke("fast").content == "ok: fast"
    assert [r["messages"][-1]["content"] for r in srv.requests] == ["slow", "fast"]


async def test_concurrency_tracking(srv: FakeOpenAI) -> None:
    """Count max concurrency and overlaps of requests sharing a key."""
    srv.delay = 0.2
    srv.concurrency_key = lambda req: req["messages"][-1]["content"][:1]
    model = llm(srv)
    await asyncio.gather(model.ainvoke("a1"), model.ainvoke("a2"), model.ainvoke("b1"))
    assert srv.max_concurrent == 3
    assert srv.overlaps == 1 and srv.overlap_keys == ["a"]
    assert len(srv.timings) == 3 and srv.in_flight == 0


def test_standalone_process() -> None:
    """Print READY with a working base URL when run as a module."""
    args = ["--port", "0", "--reply", "pong pong", "--stream-words", "--stream-delay", "0.01"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.openai_server", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[0] == "READY"
        client = ChatOpenAI(base_url=line[1], api_key="test", max_retries=0)
        assert client.invoke("ping").content == "pong pong"
        assert [c.content for c in client.stream("ping") if c.content] == ["pong ", "pong"]
    finally:
        proc.terminate()
        proc.wait(5)


class Address(BaseModel):
    """A postal address."""

    city: str
    zip_code: str | None = None


class Person(BaseModel):
    """A person with tags and a home address."""

    name: str
    tags: list[str]
    home: Address


PERSON = {"name": "Ann", "tags": ["a", "b"], "home": {"city": "Oslo", "zip_code": None}}
STRICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "home": {"$ref": "#/$defs/Address"},
    },
    "required": ["name", "tags", "home"],
    "additionalProperties": False,
    "$defs": {
        "Address": {
            "type": "object",
            "properties": {"city": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            "required": ["city"],
            "additionalProperties": False,
        }
    },
}


def sdk(srv: FakeOpenAI) -> openai.OpenAI:
    """Build a real OpenAI SDK client pointed at the fake server, without retries."""
    return openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0)


def schema_format(schema: dict[str, Any], name: str = "person", strict: bool = True) -> Any:
    """Wrap a JSON schema as a `response_format` of type json_schema."""
    return {
        "type": "json_schema",
        "json_schema": {"name": name, "schema": schema, "strict": strict},
    }


def chat(srv: FakeOpenAI, response_format: Any, text: str = "hi", **kw: Any) -> Any:
    """Send one chat completion with a `response_format` through the OpenAI SDK."""
    return sdk(srv).chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": text}],
        response_format=response_format,
        **kw,
    )


def openai_error(message: str) -> dict[str, Any]:
    """Return the error object OpenAI sends for a rejected `response_format`."""
    return {
        "message": message,
        "type": "invalid_request_error",
        "param": "response_format",
        "code": None,
    }


def test_strict_json_schema_answered(srv: FakeOpenAI) -> None:
    """Accept a strict-conforming json_schema and answer the scripted JSON, also streamed."""
    srv.script(json.dumps(PERSON), json.dumps(PERSON))
    reply = chat(srv, schema_format(STRICT_SCHEMA))
    assert json.loads(reply.choices[0].message.content or "") == PERSON
    assert srv.last_request()["response_format"] == schema_format(STRICT_SCHEMA)  # type: ignore[index]
    chunks = chat(srv, schema_format(STRICT_SCHEMA), stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(streamed) == PERSON
    assert chat(srv, {"type": "text"}).choices[0].message.content == "ok: hi"


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # SDK stream parsing quirk
async def test_with_structured_output_round_trip(srv: FakeOpenAI) -> None:
    """Parse a pydantic model through with_structured_output(method="json_schema")."""
    srv.script(*[json.dumps(PERSON)] * 3)
    structured = llm(srv, model="gpt-4o-mini").with_structured_output(Person, method="json_schema")
    assert structured.invoke("who?") == Person.model_validate(PERSON)
    sent = srv.last_request()["response_format"]  # type: ignore[index]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "Person"
    assert sent["json_schema"]["strict"] is True
    assert sent["json_schema"]["schema"]["$defs"]["Address"]["additionalProperties"] is False
    assert await structured.ainvoke("who?") == Person.model_validate(PERSON)
    streaming = llm(srv, model="gpt-4o-mini", streaming=True)
    assert streaming.with_structured_output(Person, method="json_schema").invoke("who?") == (
        Person.model_validate(PERSON)
    )
    assert srv.last_request()["stream"] is True  # type: ignore[index]
    assert srv.pending_replies() == 0


def _drop(schema: dict[str, Any]) -> None:
    del schema["additionalProperties"]


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (_drop, "In context=(), 'additionalProperties' is required to be supplied and to be false"),
        (lambda s: s["required"].remove("tags"), "In context=(), 'required' is required"),
        (
            lambda s: s["$defs"]["Address"].update(additionalProperties=True),
            "In context=('$defs', 'Address'), 'additionalProperties'",
        ),
        (
            lambda s: s["properties"]["tags"].update(
                items={"type": "object", "properties": {"x": {}}, "required": ["x"]}
            ),
            "In context=('properties', 'tags', 'items'), 'additionalProperties'",
        ),
        (
            lambda s: s["$defs"]["Address"]["properties"]["city"]["anyOf"].append(
                {"type": "object", "properties": {"y": {}}, "additionalProperties": False}
            ),
            "In context=('$defs', 'Address', 'properties', 'city', 'anyOf', '2'), 'required'",
        ),
        (lambda s: s.update(type="array"), "schema must be a JSON Schema of 'type: \"object\"'"),
    ],
    ids=["root", "required", "defs", "items", "anyof", "root-type"],
)
def test_non_strict_schema_rejected(srv: FakeOpenAI, mutate: Any, problem: str) -> None:
    """Reject a strict schema that breaks OpenAI's rules, consuming no scripted reply."""
    schema = copy.deepcopy(STRICT_SCHEMA)
    mutate(schema)
    srv.script("{}")
    with pytest.raises(openai.BadRequestError) as info:
        chat(srv, schema_format(schema))
    assert info.value.status_code == 400
    message = info.value.body["message"]  # type: ignore[index]
    assert message.startswith("Invalid schema for response_format 'person': ")
    assert problem in message
    assert info.value.body == openai_error(message)
    assert srv.requests[-1]["response_format"]["json_schema"]["schema"] == schema
    with pytest.raises(openai.BadRequestError, match="Invalid schema"):
        chat(srv, schema_format(schema), stream=True)
    assert srv.pending_replies() == 1 and len(srv.requests) == 2
    assert chat(srv, schema_format(schema, strict=False)).choices[0].message.content == "{}"


@pytest.mark.parametrize(
    ("response_format", "problem"),
    [
        ("json", "Invalid type for 'response_format': expected an object, but got a string"),
        ({}, "Missing required parameter: 'response_format.type'."),
        ({"type": "xml"}, "Invalid value: 'xml'. Supported values are"),
        ({"type": "json_schema"}, "Missing required parameter: 'response_format.json_schema'."),
        (schema_format(STRICT_SCHEMA, name="a person"), "string does not match pattern"),
        (schema_format(STRICT_SCHEMA, name="p" * 65), "string does not match pattern"),
        (
            {"type": "json_schema", "json_schema": {"name": "person"}},
            "Missing required parameter: 'response_format.json_schema.schema'.",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "p", "schema": {}, "strict": "yes"}},
            "'response_format.json_schema.strict': expected a boolean",
        ),
    ],
    ids=[
        "not-object",
        "no-type",
        "bad-type",
        "no-json-schema",
        "name",
        "long-name",
        "no-schema",
        "strict",
    ],
)
def test_invalid_response_format_rejected(
    srv: FakeOpenAI, response_format: Any, problem: str
) -> None:
    """Answer a malformed response_format with an OpenAI-style 400 before any injected fault."""
    srv.fail_next(1, status=503)
    body = {"model": "m", "messages": [{"role": "user", "content": "json"}]}
    url = f"{srv.base_url}/chat/completions"
    rejected = httpx.post(url, json={**body, "response_format": response_format}, timeout=5)
    assert rejected.status_code == 400
    error = rejected.json()["error"]
    assert problem in error["message"] and error == openai_error(error["message"])
    assert srv.last_request() == {**body, "response_format": response_format}
    assert httpx.post(url, json=body, timeout=5).status_code == 503
    assert httpx.post(url, json=body, timeout=5).status_code == 200


def test_json_object_needs_json_in_messages(srv: FakeOpenAI) -> None:
    """Reject json_object unless a message mentions JSON, as OpenAI does."""
    srv.script('{"a": 1}')
    with pytest.raises(openai.BadRequestError, match="must contain the word 'json'") as info:
        chat(srv, {"type": "json_object"}, text="give me an object")
    assert info.value.body == openai_error(
        "'messages' must contain the word 'json' in some form, to use 'response_format' of "
        "type 'json_object'."
    )
    reply = chat(srv, {"type": "json_object"}, text="Answer in JSON.")
    assert reply.choices[0].message.content == '{"a": 1}'
    structured = llm(srv, model="gpt-4o-mini").with_structured_output(method="json_mode")
    with pytest.raises(openai.BadRequestError):
        structured.invoke("an object please")
    srv.script('{"b": 2}')
    assert structured.invoke([("system", "Reply with a Json object."), ("user", "b")]) == {"b": 2}


def test_structured_output_unsupported(srv: FakeOpenAI) -> None:
    """Reject json_schema like an older server so a client can fall back to tool calls."""
    srv.supports_structured_output = False
    srv.script({"tool_calls": [{"name": "Person", "args": PERSON}]})
    with pytest.raises(openai.BadRequestError) as info:
        chat(srv, schema_format(STRICT_SCHEMA))
    assert info.value.body == openai_error("response_format type 'json_schema' is not supported")
    model = llm(srv, model="gpt-4o-mini")
    with pytest.raises(openai.BadRequestError, match="not supported"):
        model.with_structured_output(Person, method="json_schema").invoke("who?")
    fallback = model.with_structured_output(Person, method="function_calling")
    assert fallback.invoke("who?") == Person.model_validate(PERSON)
    assert srv.requests[-1]["tools"][0]["function"]["name"] == "Person"
    assert len(srv.requests) == 3 and srv.pending_replies() == 0
    assert chat(srv, {"type": "json_object"}, text="json").choices[0].message.content
    srv.reset()
    assert srv.supports_structured_output is True
    srv.script("{}")
    assert chat(srv, schema_format(STRICT_SCHEMA)).choices[0].message.content == "{}"


def test_scripted_faults_per_model(srv: FakeOpenAI) -> None:
    """Fail only the scripted model, consuming one slot per Fault, unlike fail_next."""
    srv.script_for("summary-model", Fault(500), Fault(429), "summary")
    srv.script("general")
    summary = llm(srv, model="summary-model")
    with pytest.raises(openai.InternalServerError):
        summary.invoke("a")
    assert llm(srv, model="gpt-4o-mini").invoke("b").content == "general"
    with pytest.raises(openai.RateLimitError):
        summary.invoke("c")
    assert summary.invoke("d").content == "summary"
    assert len(srv.requests_for("summary-model")) == 3 and srv.pending_replies() == 0
    srv.script(Fault(503), "after")
    srv.fail_next(1)
    with pytest.raises(openai.InternalServerError, match="fake error 500"):
        summary.invoke("e")
    with pytest.raises(openai.InternalServerError, match="fake error 503"):
        summary.invoke("f")
    assert summary.invoke("g").content == "after"


def test_scripted_fault_kinds(srv: FakeOpenAI) -> None:
    """Answer each Fault kind like the matching injected fault, streaming included."""
    not_found = {
        "error": {
            "message": "The model 'x' does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
    srv.script(Fault(kind="close"), Fault(kind="malformed"), Fault(404, body=not_found), Fault(500))
    model = llm(srv)
    with pytest.raises(openai.APIConnectionError):
        model.invoke("x")
    with pytest.raises(ValueError):
        model.invoke("x")
    with pytest.raises(openai.NotFoundError) as info:
        model.invoke("x")
    assert info.value.code == "model_not_found"
    with pytest.raises(openai.InternalServerError):
        llm(srv, streaming=True).invoke("x")
    assert srv.pending_replies() == 0 and len(srv.requests) == 4
    with pytest.raises(ValueError, match="kind"):
        Fault(kind="timeout")
    with pytest.raises(ValueError, match="400-599"):
        Fault(200)


async def test_callable_returns_fault(srv: FakeOpenAI) -> None:
    """Answer a Fault returned by a sync or async callable reply or set as the default."""
    calls: list[dict[str, Any]] = []

    def flaky(request: dict[str, Any]) -> Any:
        calls.append(request)
        return Fault(500) if len(calls) == 1 else f"ok after {len(calls)}"

    async def dropper(request: dict[str, Any]) -> Fault:
        await asyncio.sleep(0)
        return Fault(kind="close")

    model = llm(srv)
    srv.default_reply = flaky
    with pytest.raises(openai.InternalServerError):
        await model.ainvoke("x")
    assert (await model.ainvoke("x")).content == "ok after 2"
    srv.script(dropper)
    with pytest.raises(openai.APIConnectionError):
        await model.ainvoke("x")
    srv.default_reply = Fault(503)
    for _ in range(2):
        with pytest.raises(openai.InternalServerError, match="fake error 503"):
            await model.ainvoke("x")
    assert len(srv.requests) == 5


EMBED_MODEL = "text-embedding-3-small"


def embedder(srv: FakeOpenAI, **kw: Any) -> OpenAIEmbeddings:
    """Build a real OpenAIEmbeddings client (base64 path) pointed at the fake server."""
    return OpenAIEmbeddings(
        model=kw.pop("model", EMBED_MODEL),
        base_url=srv.base_url,
        api_key="x",  # type: ignore[arg-type]
        check_embedding_ctx_length=False,
        max_retries=0,
        **kw,
    )


def embed_raw(srv: FakeOpenAI, body: Any) -> httpx.Response:
    """POST a raw JSON body to the fake embeddings endpoint."""
    return httpx.post(f"{srv.base_url}/embeddings", json=body, timeout=5)


def cosine(a: list[float], b: list[float]) -> float:
    """Return the cosine similarity of two vectors."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_embeddings_client_round_trip(srv: FakeOpenAI) -> None:
    """Serve embed_documents and embed_query as base64 float32, deterministic per text."""
    texts = [
        "The nurse checks the patient",
        "The nurses checked the patients!",
        "Quarterly tax report",
    ]
    vectors = embedder(srv).embed_documents(texts)
    assert len(vectors) == 3 and all(len(v) == 64 for v in vectors)
    for text, vector in zip(texts, vectors, strict=True):
        assert vector == pytest.approx(fake_embedding(text), abs=1e-6)
    assert cosine(vectors[0], vectors[1]) > 0.99  # same 5-character stems
    assert cosine(vectors[0], vectors[2]) < 0.5
    assert embedder(srv).embed_query("Quarterly TAX report") == pytest.approx(vectors[2], abs=1e-6)
    first = srv.embedding_requests[0]
    assert first == {"model": EMBED_MODEL, "input": texts, "encoding_format": "base64"}
    assert len(srv.embedding_requests) == 2 and srv.requests == []
    assert fake_embedding("...", 8) == [1.0] + [0.0] * 7
    assert sum(x * x for x in fake_embedding("a b c d e f")) == pytest.approx(1.0)


async def test_embeddings_async_client(srv: FakeOpenAI) -> None:
    """Serve the async client too, honouring `dimensions` on the base64 path."""
    vectors = await embedder(srv, dimensions=16).aembed_documents(["alpha beta", "gamma"])
    assert [len(v) for v in vectors] == [16, 16]
    assert vectors[1] == pytest.approx(fake_embedding("gamma", 16), abs=1e-6)
    assert srv.embedding_requests[-1]["dimensions"] == 16


def test_embeddings_float_format_and_tokens(srv: FakeOpenAI) -> None:
    """Answer the OpenAI response shape with float vectors, dimensions and token-id inputs."""
    reply = embed_raw(
        srv, {"model": "fake-embed", "input": "Hello, world", "encoding_format": "float"}
    )
    assert reply.status_code == 200
    assert reply.json() == {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": fake_embedding("hello world")}],
        "model": "fake-embed",
        "usage": {"prompt_tokens": 2, "total_tokens": 2},
    }
    body = {
        "model": "fake-embed",
        "input": ["a b", "c"],
        "dimensions": 8,
        "encoding_format": "float",
    }
    data = embed_raw(srv, body).json()["data"]
    assert [d["index"] for d in data] == [0, 1]
    assert [d["embedding"] for d in data] == [fake_embedding("a b", 8), fake_embedding("c", 8)]
    tokens = {"model": "fake-embed", "encoding_format": "float"}
    flat = embed_raw(srv, {**tokens, "input": [15339, 1917]}).json()
    assert len(flat["data"]) == 1 and flat["usage"]["prompt_tokens"] == 2
    assert flat["data"][0]["embedding"] == fake_embedding("15339 1917")
    nested = embed_raw(srv, {**tokens, "input": [[1, 2], [3]]}).json()
    assert [d["embedding"] for d in nested["data"]] == [fake_embedding("1 2"), fake_embedding("3")]
    assert nested["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    srv.embedding_dims = 1536
    assert len(embed_raw(srv, {**tokens, "input": "x"}).json()["data"][0]["embedding"]) == 1536


def invalid(message: str, param: str | None) -> dict[str, Any]:
    """Return the error object OpenAI sends for a rejected embeddings request."""
    return {"message": message, "type": "invalid_request_error", "param": param, "code": None}


BAD_INPUT = invalid(INVALID_INPUT, "input")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            ["not", "an", "object"],
            invalid("Invalid type for 'body': expected an object, but got an array instead.", None),
        ),
        ({"input": "x"}, invalid("Missing required parameter: 'model'.", "model")),
        (
            {"model": 3, "input": "x"},
            invalid(
                "Invalid type for 'model': expected a string, but got an integer instead.", "model"
            ),
        ),
        ({"model": EMBED_MODEL}, invalid("Missing required parameter: 'input'.", "input")),
        ({"model": EMBED_MODEL, "input": ""}, BAD_INPUT),
        ({"model": EMBED_MODEL, "input": []}, BAD_INPUT),
        ({"model": EMBED_MODEL, "input": ["a", ""]}, BAD_INPUT),
        ({"model": EMBED_MODEL, "input": ["a", 1]}, BAD_INPUT),
        ({"model": EMBED_MODEL, "input": [[1], []]}, BAD_INPUT),
        ({"model": EMBED_MODEL, "input": [[1], ["a"]]}, BAD_INPUT),
        ({"model": EMBED_MODEL, "input": [True]}, BAD_INPUT),
        ({"model": EMBED_MODEL, "input": 42}, BAD_INPUT),
        ({"model": EMBED_MODEL, "input": {"text": "a"}}, BAD_INPUT),
        (
            {"model": EMBED_MODEL, "input": ["a"] * 2049},
            invalid(
                "Invalid 'input': array too long. Expected an array with maximum length 2048, "
                "but got an array with length 2049 instead.",
                "input",
            ),
        ),
        (
            {"model": EMBED_MODEL, "input": "a", "encoding_format": "int8"},
            invalid(
                "Invalid value: 'int8'. Supported values are: 'float' and 'base64'.",
                "encoding_format",
            ),
        ),
        (
            {"model": EMBED_MODEL, "input": "a", "encoding_format": 1},
            invalid(
                "Invalid type for 'encoding_format': expected a string, but got an integer "
                "instead.",
                "encoding_format",
            ),
        ),
        (
            {"model": EMBED_MODEL, "input": "a", "dimensions": "8"},
            invalid(
                "Invalid type for 'dimensions': expected an integer, but got a string instead.",
                "dimensions",
            ),
        ),
        (
            {"model": EMBED_MODEL, "input": "a", "dimensions": True},
            invalid(
                "Invalid type for 'dimensions': expected an integer, but got a boolean instead.",
                "dimensions",
            ),
        ),
        (
            {"model": EMBED_MODEL, "input": "a", "dimensions": 0},
            invalid(
                "Invalid 'dimensions': integer below minimum value. Expected a value >= 1, "
                "but got 0 instead.",
                "dimensions",
            ),
        ),
        (
            {"model": EMBED_MODEL, "input": "a", "dimensions": 65},
            invalid(
                "Invalid 'dimensions': integer above maximum value. Expected a value <= 64, "
                "but got 65 instead.",
                "dimensions",
            ),
        ),
    ],
    ids=[
        "not-object",
        "no-model",
        "model-type",
        "no-input",
        "empty-string",
        "empty-array",
        "empty-item",
        "mixed-items",
        "empty-token-array",
        "strings-in-token-arrays",
        "boolean-token",
        "bare-integer",
        "object-input",
        "too-many",
        "format-value",
        "format-type",
        "dimensions-type",
        "dimensions-boolean",
        "dimensions-zero",
        "dimensions-too-large",
    ],
)
def test_embeddings_invalid_request_rejected(
    srv: FakeOpenAI, body: Any, error: dict[str, Any]
) -> None:
    """Answer a malformed embeddings request with an OpenAI-style 400, consuming no fault."""
    srv.fail_embeddings_next(1, status=503)
    rejected = embed_raw(srv, body)
    assert rejected.status_code == 400
    assert rejected.json() == {"error": error}
    assert srv.embedding_requests == [body]
    valid = {"model": EMBED_MODEL, "input": "a"}
    assert embed_raw(srv, valid).status_code == 503
    assert embed_raw(srv, valid).status_code == 200
    assert len(srv.embedding_requests) == 3


def test_embeddings_client_rejections(srv: FakeOpenAI) -> None:
    """Raise the SDK's errors for an empty text and an unknown model, as OpenAI would."""
    with pytest.raises(openai.BadRequestError, match=r"'\$\.input' is invalid"):
        embedder(srv).embed_query("")
    with pytest.raises(openai.NotFoundError) as info:
        embedder(srv, model="text-embedding-9").embed_query("hi")
    assert info.value.status_code == 404 and info.value.code == "model_not_found"
    assert info.value.body == {
        "message": "The model `text-embedding-9` does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }
    assert srv.embedding_requests[-1]["model"] == "text-embedding-9"
    srv.embedding_models.append("text-embedding-9")
    assert len(embedder(srv, model="text-embedding-9").embed_query("hi")) == 64


def test_embedding_faults(srv: FakeOpenAI) -> None:
    """Fail, delay and take down embeddings without touching the chat endpoint."""
    client = embedder(srv)
    srv.fail_embeddings_next(1)
    with pytest.raises(openai.InternalServerError, match="fake error 500"):
        client.embed_query("x")
    srv.fail_embeddings_next(1, status=429)
    with pytest.raises(openai.RateLimitError):
        client.embed_query("x")
    custom = {"error": {"message": "quota", "type": "insufficient_quota", "param": None}}
    srv.fail_embeddings_next(1, status=429, body=custom)
    with pytest.raises(openai.RateLimitError, match="quota"):
        client.embed_query("x")
    assert len(client.embed_query("x")) == 64
    with pytest.raises(ValueError, match="400-599"):
        srv.fail_embeddings_next(1, status=200)
    srv.delay_embeddings_next(1, 30.0)
    with pytest.raises(openai.APITimeoutError):
        embedder(srv, timeout=0.2).embed_query("slow")
    assert len(embedder(srv, timeout=5).embed_query("fast")) == 64
    srv.embeddings_down = True
    for body in ({"model": EMBED_MODEL, "input": "x"}, {"model": EMBED_MODEL, "input": ""}):
        down = embed_raw(srv, body)
        assert down.status_code == 503 and down.json()["error"]["type"] == "server_error"
    with pytest.raises(openai.InternalServerError):
        client.embed_documents(["x"])
    assert llm(srv).invoke("chat still works").content == "ok: chat still works"
    assert len(srv.embedding_requests) == 9 and len(srv.requests) == 1
    srv.reset()
    assert srv.embeddings_down is False and srv.embedding_requests == []
    assert len(client.embed_query("x")) == 64


def test_embedding_and_chat_faults_are_separate(srv: FakeOpenAI) -> None:
    """Never let embedding requests consume chat faults, nor chat requests embedding faults."""
    srv.fail_next(1, status=500)
    assert len(embedder(srv).embed_query("x")) == 64
    with pytest.raises(openai.InternalServerError):
        llm(srv).invoke("x")
    srv.delay_next(1, 30.0)
    assert len(embedder(srv, timeout=5).embed_query("x")) == 64
    with pytest.raises(openai.APITimeoutError):
        llm(srv, timeout=0.2).invoke("x")
    srv.reset()
    srv.fail_embeddings_next(1, status=503)
    srv.delay_embeddings_next(1, 30.0)
    assert llm(srv, timeout=5).invoke("chat").content == "ok: chat"
    with pytest.raises(openai.APITimeoutError):
        embedder(srv, timeout=0.2).embed_query("x")
    assert len(embedder(srv).embed_query("x")) == 64


def test_embedding_synonyms(srv: FakeOpenAI) -> None:
    """Map words through embedding_synonyms so texts in two languages embed equally."""
    client = embedder(srv)
    nurse, russian = client.embed_documents(["the nurse", "the медсестра"])
    assert cosine(nurse, russian) < 0.99
    srv.embedding_synonyms = {"Медсестра": "nurse"}
    nurse, russian = client.embed_documents(["the nurse", "THE МЕДСЕСТРА"])
    assert nurse == russian
    assert russian == pytest.approx(
        fake_embedding("the медсестра", synonyms=srv.embedding_synonyms), abs=1e-6
    )
    srv.reset()
    assert srv.embedding_synonyms == {}


def test_embedding_state_clear_and_reset(srv: FakeOpenAI) -> None:
    """Forget embedding requests and faults on clear and restore the settings on reset."""
    srv.embedding_dims = 8
    srv.embedding_models = ["only-model"]
    srv.embedding_synonyms["a"] = "b"
    srv.fail_embeddings_next(2)
    srv.delay_embeddings_next(2, 30.0)
    assert embed_raw(srv, {"model": EMBED_MODEL, "input": "x"}).status_code == 404
    srv.clear()
    assert srv.embedding_requests == [] and srv.embedding_dims == 8
    reply = embed_raw(srv, {"model": "only-model", "input": "a", "dimensions": 8})
    assert reply.json()["data"][0]["embedding"] == fake_embedding("b", 8)  # float by default
    srv.fail_embeddings_next(1)
    srv.embeddings_down = True
    srv.reset()
    assert (srv.embedding_dims, srv.embedding_models) == (64, [EMBED_MODEL, "fake-embed"])
    reply = embed_raw(srv, {"model": EMBED_MODEL, "input": "x", "encoding_format": "float"})
    assert reply.status_code == 200 and len(reply.json()["data"][0]["embedding"]) == 64


def test_compute_entities() -> None:
    """Compute command and mention entities with UTF-16 offsets."""
    assert compute_entities("😀 /start@bot hi @someone") == [
        {"type": "bot_command", "offset": 3, "length": 10},
        {"type": "mention", "offset": 17, "length": 8},
    ]


async def test_bot_basics(tg: FakeBotAPI) -> None:
    """Serve getMe, sendMessage, editMessageText, chat actions and commands to PTB."""
    async with make_bot(tg) as bot:
        assert bot.username == "tgagent_test_bot" and bot.id == 999
        sent = await bot.send_message(42, "hello")
        assert sent.text == "hello" and sent.chat.id == 42 and sent.from_user.is_bot
        edited = await bot.edit_message_text("hello!", chat_id=42, message_id=sent.message_id)
        assert isinstance(edited, telegram.Message) and edited.text == "hello!"
        with pytest.raises(BadRequest, match="not modified"):
            await bot.edit_message_text("hello!", chat_id=42, message_id=sent.message_id)
        await bot.send_chat_action(42, "typing")
        await bot.set_my_commands([("start", "Start"), ("help", "Help")])
        assert [c.command for c in await bot.get_my_commands()] == ["start", "help"]
        await bot.delete_webhook()
    assert tg.texts_to(42) == ["hello", "hello!"]
    assert tg.actions[0]["chat_id"] == 42 and tg.actions[0]["action"] == "typing"
    assert [c["method"] for c in tg.calls][:2] == ["getMe", "sendMessage"]


async def test_bot_updates(tg: FakeBotAPI) -> None:
    """Deliver pushed updates through long polling with offsets."""
    async with make_bot(tg) as bot:
        first = tg.push_text(7, "/start now", first_name="Ann")
        tg.push_photo(7, caption="look")
        tg.push_text(8, "hi @tgagent_test_bot", chat_type="group", reply_to_bot=True)
        updates = await bot.get_updates(timeout=5)
        assert [u.update_id for u in updates] == [first, first + 1, first + 2]
        msg = updates[0].message
        assert msg is not None and msg.text == "/start now" and msg.from_user.first_name == "Ann"
        assert msg.entities[0].type == "bot_command" and msg.entities[0].length == 6
        assert updates[1].message.photo[-1].width == 800 and updates[1].message.caption == "look"
        group = updates[2].message
        assert group.chat.type == "group" and group.chat.id < 0
        assert group.reply_to_message.from_user.id == 999
        assert group.entities[0].type == "mention"
        # The fake caps the long poll (max_poll_timeout): an empty poll returns nothing.
        assert await bot.get_updates(offset=first + 3, timeout=5) == ()
        kw = {"message_id": msg.message_id}
        threading.Timer(0.1, tg.push_edited_text, (7, "/start later"), kw).start()
        (edit,) = await bot.get_updates(offset=first + 3, timeout=5)
        assert edit.edited_message.text == "/start later"
        assert edit.edited_message.message_id == msg.message_id
        file = await bot.get_file(updates[1].message.photo[-1].file_id)
        assert (await file.download_as_bytearray()).startswith(b"fake-file:")


async def test_bot_errors(tg: FakeBotAPI) -> None:
    """Map injected faults to the matching PTB exceptions."""
    async with make_bot(tg) as bot:
        tg.fail_next("sendMessage", 1, error_code=429, retry_after=3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PTB 22 warns that the type becomes timedelta
            with pytest.raises(RetryAfter) as info:
                await bot.send_message(1, "x")
            retry_after = info.value.retry_after
        assert getattr(retry_after, "total_seconds", lambda: retry_after)() == 3
        tg.block_user(5)
        with pytest.raises(Forbidden, match="blocked"):
            await bot.send_message(5, "x")
        tg.reject_parse_mode = True
        with pytest.raises(BadRequest, match="(?i)can't parse entities"):
            await bot.send_message(1, "<b>x</b>", parse_mode="HTML")
        await bot.send_message(1, "x")
        with pytest.raises(BadRequest, match="too long"):
            await bot.send_message(1, "x" * 4097)
        assert tg.wait_for_messages(1, 1, timeout=1)[0]["text"] == "x"
        assert (await tg.await_messages(1, 1, timeout=1))[0]["text"] == "x"
        with pytest.raises(TimeoutError):
            await tg.await_messages(1, 2, timeout=0.05)
    with pytest.raises(InvalidToken):
        async with make_bot(tg, "1:WRONG") as wrong:
            await wrong.get_me()


def test_bot_raw_http(tg: FakeBotAPI) -> None:
    """Accept JSON bodies and answer unknown methods with a 404 error object."""
    url = f"{tg.base_url}{TOKEN}"
    request = urllib.request.Request(
        f"{url}/sendMessage",
        data=json.dumps({"chat_id": 3, "text": "json body"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert json.load(response)["result"]["text"] == "json body"
    assert tg.texts_to(3) == ["json body"]
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{url}/noSuchMethod", timeout=5)
    assert json.load(info.value) == {
        "ok": False,
        "error_code": 404,
        "description": "Not Found: method not found",
    }


async def test_a_one_slot_server_serves_requests_one_after_the_other(srv: FakeOpenAI) -> None:
    """`slots = 1` (llama-cpp-python, llama.cpp's `--parallel 1`): a request that comes
    while another is served waits for it, and is answered after it."""
    srv.slots = 1
    srv.token_seconds = 0.01
    srv.script("first " * 20, "second")
    client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
    done: list[str] = []

    async def ask(text: str) -> None:
        answer = await client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": text}]
        )
        done.append(answer.choices[0].message.content or "")

    first = asyncio.create_task(ask("one"))
    while not srv.served:  # the first has its slot
        await asyncio.sleep(0.01)
    await asyncio.gather(first, ask("two"))
    assert srv.served == [0, 1] and len(srv.requests) == 2
    assert [d.split()[0] for d in done] == ["first", "second"]
    await client.close()
