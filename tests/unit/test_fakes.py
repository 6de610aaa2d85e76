"""Prove the fake OpenAI and Telegram Bot API servers work with the real client libraries."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import telegram
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from telegram.error import BadRequest, Forbidden, InvalidToken, RetryAfter

from tests.fakes.bot_api_server import FakeBotAPI, compute_entities
from tests.fakes.openai_server import FakeOpenAI

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


@pytest.fixture(scope="module")
def tg_server() -> Iterator[FakeBotAPI]:
    """Run one fake Bot API server for the module."""
    with FakeBotAPI(TOKEN) as server:
        yield server


@pytest.fixture()
def tg(tg_server: FakeBotAPI) -> Iterator[FakeBotAPI]:
    """Hand out the shared fake Bot API server in a clean state."""
    tg_server.reset()
    yield tg_server


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
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        llm(srv, timeout=0.2).invoke("slow")
    assert time.monotonic() - started < 1.5
    assert llm(srv, timeout=2).invoke("fast").content == "ok: fast"


async def test_concurrency_tracking(srv: FakeOpenAI) -> None:
    """Count max concurrency and overlaps of requests sharing a key."""
    srv.delay = 0.2
    srv.concurrency_key = lambda req: req["messages"][-1]["content"][:1]
    model = llm(srv)
    await asyncio.gather(model.ainvoke("a1"), model.ainvoke("a2"), model.ainvoke("b1"))
    assert srv.max_concurrent == 3
    assert srv.overlaps == 1 and srv.overlap_keys == ["a"]
    assert min(srv.timings) >= 0.2


def test_standalone_process() -> None:
    """Print READY with a working base URL when run as a module."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.openai_server", "--port", "0", "--reply", "pong"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[0] == "READY"
        client = ChatOpenAI(base_url=line[1], api_key="test", max_retries=0)
        assert client.invoke("ping").content == "pong"
    finally:
        proc.terminate()
        proc.wait(5)


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
        started = time.monotonic()
        assert await bot.get_updates(offset=first + 3, timeout=5) == ()
        assert time.monotonic() - started < 2
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
