"""Reading cut facts answers, telling a refused `response_format` from a failure, and
logging a failure on one line (no network, no database)."""

from __future__ import annotations

import json
import logging
import sys

import httpx
import openai
import pytest
from langchain_core.exceptions import ModelRefusalError
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI

from src.cli.logging_setup import OneLineFormatter, RedactSecrets, one_line_logs
from src.graph.memory.errors import is_outage, is_refusal, raise_on_refusal
from src.graph.memory.facts import read_facts
from src.graph.memory.facts_salvage import complete_items
from src.graph.memory.folds import Backoff
from src.graph.memory.structured import endpoint_of, refuses_format
from tests.fakes.openai_server import unknown_format

ITEMS = [
    {"key": "city", "value": 'Paris, {the} "old" one', "type": "fact", "importance": 7},
    {"key": "dog", "value": "Rex]", "type": "fact", "importance": 5},
]
WHOLE = json.dumps({"facts": ITEMS}, ensure_ascii=False)


def status_error(status: int, body: object) -> openai.APIStatusError:
    """Return the error the openai client raises for an HTTP `status` answering `body`."""
    request = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
    response = httpx.Response(status, json=body, request=request)
    return openai.OpenAI(api_key="k", base_url="http://127.0.0.1:1/v1")._make_status_error(
        f"Error code: {status} - {body}", body=body, response=response
    )


@pytest.mark.parametrize("cut_at", [len(WHOLE) - 3, WHOLE.index('"Rex') + 2])
def test_complete_items_of_a_cut_answer(cut_at: int) -> None:
    """The items before the cut are read whole; the one being written is dropped."""
    assert complete_items(WHOLE[:cut_at]) == ITEMS[:1]


def test_complete_items_of_other_shapes() -> None:
    cut = WHOLE[: WHOLE.index('{"key": "dog"') + 5]
    assert complete_items("Here you go:\n```json\n" + cut) == ITEMS[:1]
    bare = json.dumps(ITEMS)
    assert complete_items(bare[:-1]) == ITEMS  # a bare list, cut at its end
    assert complete_items('{"facts": [') == []
    assert complete_items("no json at all") == []
    assert complete_items('{"facts": ["a string", {"key": "x"}]') == []
    assert read_facts(complete_items(WHOLE[: len(WHOLE) - 3]))[0]["key"] == "city"


def test_refused_response_format_is_told_from_a_failure() -> None:
    llama = unknown_format({"response_format": {"type": "json_schema"}}, "json_object")
    assert llama is not None
    assert "Input should be 'text' or 'json_object'" in llama["error"]["message"]
    assert refuses_format(status_error(500, llama))
    text_only = unknown_format({"response_format": {"type": "json_object"}}, "text")
    assert text_only is not None and refuses_format(status_error(500, text_only))
    older = {"error": {"message": "response_format type 'json_schema' is not supported"}}
    assert refuses_format(status_error(400, older))
    # A transient failure, or a refusal of the input, demotes nothing.
    assert not refuses_format(status_error(500, {"error": {"message": "fake error 500"}}))
    assert not refuses_format(status_error(400, {"error": {"message": "content policy"}}))
    assert not refuses_format(RuntimeError("schema"))
    assert unknown_format({"response_format": {"type": "json_object"}}, "json_object") is None
    assert unknown_format({}, "text") is None


def test_endpoint_of_is_base_url_and_model() -> None:
    model = ChatOpenAI(model="m1", base_url="http://127.0.0.1:9/v1/", api_key="k")  # type: ignore[arg-type]
    assert endpoint_of(model) == ("http://127.0.0.1:9/v1", "m1")
    default = ChatOpenAI(model="m2", api_key="k")  # type: ignore[arg-type]
    assert endpoint_of(default)[1] == "m2" and endpoint_of(default)[0].startswith("https://")


def record_with(exc: BaseException) -> logging.LogRecord:
    try:
        raise exc
    except type(exc):
        info = sys.exc_info()
    return logging.LogRecord(
        "src.x", logging.WARNING, __file__, 1, "fact extraction failed", (), info
    )


def test_one_line_formatter_never_shows_a_traceback() -> None:
    secret = "sk-SECRET-123456"
    exc = status_error(500, {"error": {"message": f"boom\nat key {secret}"}})
    record = record_with(exc)
    redact = RedactSecrets([secret])
    assert redact.filter(record)
    line = OneLineFormatter(redact).format(record)
    assert "\n" not in line and "Traceback" not in line and secret not in line
    assert "fact extraction failed (InternalServerError 500: " in line
    # The record keeps its traceback for other handlers.
    assert record.exc_info is not None and "Traceback" in logging.Formatter().format(record)


def test_one_line_logs_only_without_debug() -> None:
    root = logging.getLogger()
    handler = logging.StreamHandler()
    level, handlers = root.level, root.handlers[:]
    root.handlers = [handler]
    try:
        root.setLevel(logging.DEBUG)
        one_line_logs()
        assert not isinstance(handler.formatter, OneLineFormatter)
        root.setLevel(logging.WARNING)
        one_line_logs()
        assert isinstance(handler.formatter, OneLineFormatter)
    finally:
        root.handlers, root.level = handlers, level


@pytest.mark.parametrize(
    "answer",
    [
        AIMessage("Summary so", response_metadata={"finish_reason": "content_filter"}),
        AIMessage("", additional_kwargs={"refusal": "I can't help with that."}),
        AIMessage([{"type": "refusal", "refusal": "No."}]),
    ],
    ids=["content-filter", "refusal-field", "refusal-block"],
)
def test_a_refusal_is_a_refusal_however_said(answer: AIMessage) -> None:
    with pytest.raises(ModelRefusalError) as caught:
        raise_on_refusal(answer)
    assert is_refusal(caught.value)


def test_answers_and_errors_that_are_no_refusal() -> None:
    fine = AIMessage("A summary.", response_metadata={"finish_reason": "stop"})
    assert raise_on_refusal(fine) is fine
    assert is_refusal(status_error(400, {"error": {"message": "flagged"}}))
    assert not is_refusal(status_error(500, {"error": {"message": "down"}}))
    assert not is_refusal(status_error(429, {"error": {"message": "slow down"}}))


def test_an_endpoint_that_answers_again_ends_the_wait_of_its_outage_only() -> None:
    now = [0.0]
    backoff = Backoff(base=5.0, clock=lambda: now[0])
    for _ in range(7):
        backoff.failed("down", "http://a/v1")
    backoff.failed("elsewhere", "http://b/v1")
    backoff.failed("too long")  # not the endpoint's fault
    now[0] = 3.0
    assert backoff.waiting("down") and backoff.waiting("too long")
    backoff.endpoint_up("http://a/v1")
    assert not backoff.waiting("down")
    assert backoff.waiting("elsewhere") and backoff.waiting("too long")
    assert is_outage(status_error(503, {"error": {"message": "down"}}))
    assert is_outage(status_error(429, {"error": {"message": "slow down"}}))
    assert is_outage(openai.APITimeoutError(httpx.Request("POST", "http://a/v1")))
    assert not is_outage(status_error(400, {"error": {"message": "flagged"}}))
    assert not is_outage(status_error(401, {"error": {"message": "bad key"}}))
    assert not is_outage(ValueError("the summary stayed over its budget"))
