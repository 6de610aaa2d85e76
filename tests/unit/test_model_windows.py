"""The windows servers say in their refusals, the book that remembers them, and which
window a request is planned within (a setting wins unless the server proved less)."""

from __future__ import annotations

import gc
import warnings
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from langchain_core.callbacks import BaseCallbackHandler

from src.config import Settings
from src.model_windows import Window, WindowBook, is_overflow, window_of_error
from src.services.llm_service import make_chat_model
from tests.fakes.openai_windows import overflow

BASE = "http://127.0.0.1:8080/v1"
BODY = {"model": "m", "messages": [{"role": "user", "content": "x" * 4000}], "max_tokens": 64}


def refusal(status: int, payload: object) -> openai.APIStatusError:
    """Return the error the OpenAI client raises for this answer of a server."""
    request = httpx.Request("POST", BASE + "/chat/completions")
    response = httpx.Response(status, json=payload, request=request)
    return openai.OpenAI(api_key="k", base_url=BASE)._make_status_error_from_response(response)


@pytest.mark.parametrize("flavour", ["openai", "llama.cpp", "llama-cpp-python", "vllm"])
def test_each_servers_refusal_says_its_window(flavour: str) -> None:
    fault = overflow(flavour, 512, BODY)
    assert fault is not None and fault[0] == "status"
    exc = refusal(fault[1], fault[2])
    assert is_overflow(exc)
    assert window_of_error(exc) == 512


def test_llama_cpp_python_itself_and_older_llama_cpp_wordings() -> None:
    assert window_of_error("Requested tokens (2137) exceed context window of 2048") == 2048
    old = refusal(
        400,
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "invalid_request_error",
            }
        },
    )
    assert is_overflow(old) and window_of_error(old) is None


def test_other_refusals_are_not_overflows() -> None:
    assert not is_overflow(refusal(400, {"error": {"message": "Invalid 'messages[0]'"}}))
    assert not is_overflow(refusal(500, {"error": {"message": "maximum context length is 9"}}))


def test_the_book_remembers_across_restarts_and_plans_on_less_when_refused_again(
    tmp_path: Path,
) -> None:
    book = WindowBook.in_dir(tmp_path)
    book.put(BASE, "a", Window(4096, "props"))
    book.learn(BASE, "b", 2048)
    again = WindowBook.in_dir(tmp_path)
    assert again.get(BASE, "a") == Window(4096, "props")
    assert again.get(BASE, "b") == Window(2048, "error")
    assert again.get(BASE + "/", "b") == Window(2048, "error")  # one endpoint, one key
    assert again.get("http://other:8080/v1", "b") is None
    again.plan_within(BASE, "b", 1800)  # the server counts more than we do
    assert again.learn(BASE, "b", 2048) == Window(2048, "error", 1800)  # kept
    again.plan_within(BASE, "b", 100)
    assert again.get(BASE, "b") == Window(2048, "error", 1024)  # never below half
    (tmp_path / "model_windows.json").write_text("{not json", encoding="utf-8")
    assert WindowBook.in_dir(tmp_path).get(BASE, "a") is None  # a broken file: no error


def test_a_setting_wins_unless_the_server_refused_within_it(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, openai_base_url=BASE, model_context_limits={"a": 8000})  # type: ignore[call-arg]
    assert settings.window("a") == Window(8000, "setting")
    assert settings.window("b") == Window(16_000, "default")
    book = WindowBook.in_dir(tmp_path)
    settings.use_windows(book)
    book.put(BASE, "a", Window(4096, "props"))
    book.put(BASE, "b", Window(4096, "props"))
    assert settings.context_limit("a") == 8000  # the operator's word over the server's
    assert settings.context_limit("b") == 4096
    book.learn(BASE, "a", 4096)  # the server refused a request planned within 8000
    assert settings.window("a") == Window(4096, "error")
    copy = settings.model_copy(update={"llm_model": "a"})
    assert copy.windows is book


class _Refuses(BaseCallbackHandler):
    """A handler that refuses every call at its start, as the budget's guard does."""

    run_inline = True
    raise_error = True

    async def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        raise PermissionError("over budget")


async def test_a_call_refused_at_its_start_leaves_no_handler_unawaited(tmp_path: Path) -> None:
    # LangChain awaits a call's start handlers in turn and stops at the first that
    # raises: a handler after the refusing one is a coroutine never awaited, which
    # Python reports (and the test run fails on) whenever it is collected.
    settings = Settings(_env_file=None, openai_base_url="http://127.0.0.1:9/v1")  # type: ignore[call-arg]
    settings.use_windows(WindowBook.in_dir(tmp_path))
    model = make_chat_model(settings, "a", callbacks=[_Refuses()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(PermissionError):
            await model.ainvoke("hello")
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
