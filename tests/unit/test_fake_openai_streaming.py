"""The fake OpenAI server streams at a set pace, word by word if asked, and notices a client
that cancels a streamed call. Timing is asserted only from below, with room to spare."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest
from langchain_openai import ChatOpenAI

from tests.fakes.openai_server import FakeOpenAI

REPLY = "one two  three\nfour five"


def client(srv: FakeOpenAI, timeout: float = 10.0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=srv.base_url, api_key="test", max_retries=0, timeout=timeout)


async def stream_pieces(srv: FakeOpenAI) -> tuple[float, list[tuple[float, str]]]:
    """Stream one answer; return when it was asked and each content piece with its arrival."""
    async with client(srv) as sdk:
        began = time.monotonic()
        stream = await sdk.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        pieces = [
            (time.monotonic(), chunk.choices[0].delta.content)
            async for chunk in stream
            if chunk.choices and chunk.choices[0].delta.content
        ]
    return began, pieces


async def wait_until(check: object, timeout: float = 5.0) -> None:
    """Poll `check()` until it is true; the server notices a gone client on its own loop."""
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(0.02)


async def test_chunks_come_stream_delay_apart(srv: FakeOpenAI) -> None:
    srv.stream_delay = 0.15
    srv.script("x" * 64)  # four 16-character chunks: three pauses
    began, pieces = await stream_pieces(srv)
    assert [p for _, p in pieces] == ["x" * 16] * 4
    assert pieces[-1][0] - pieces[0][0] >= 0.8 * 3 * 0.15
    # The stream's last bytes reach the client before the server's handler returns.
    await wait_until(lambda: srv.in_flight == 0)
    assert srv.cancelled_streams == 0


async def test_first_token_after_the_delay_then_paced(srv: FakeOpenAI) -> None:
    srv.delay_next(1, 0.3)
    srv.stream_delay = 0.1
    srv.stream_words = True
    srv.script(REPLY)
    began, pieces = await stream_pieces(srv)
    assert pieces[0][0] - began >= 0.8 * 0.3  # time to first token: the delay
    assert pieces[-1][0] - pieces[0][0] >= 0.8 * 4 * 0.1
    assert [p for _, p in pieces] == ["one ", "two  ", "three\n", "four ", "five"]


async def test_each_request_records_when_it_came_and_its_first_content_went_out(
    srv: FakeOpenAI,
) -> None:
    srv.delay_next(1, 0.3)
    srv.stream_delay = 0.1
    srv.stream_words = True
    srv.script(REPLY, "whole", {"tool_calls": [{"name": "f", "args": {}}]})
    before = time.time()
    _, pieces = await stream_pieces(srv)
    [streamed] = srv.request_times
    arrived, first = streamed["arrived"], streamed["first_content"]
    assert arrived is not None and first is not None and before <= arrived
    assert first - arrived >= 0.8 * 0.3  # the time to first token
    # Noted as the first chunk went out, not as the last one did.
    assert time.time() - first >= 0.8 * 4 * 0.1
    async with client(srv) as sdk:
        for _ in range(2):  # a whole answer, then tool calls with no content
            await sdk.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "hi"}]
            )
        with pytest.raises(openai.BadRequestError):
            await sdk.chat.completions.create(model="fake-model", messages=[])
    assert len(srv.request_times) == len(srv.requests) == 4
    whole, tools, rejected = srv.request_times[1:]
    assert whole["first_content"] is not None and whole["first_content"] >= whole["arrived"]
    assert tools["first_content"] is None and rejected["first_content"] is None
    srv.clear()
    assert srv.request_times == []


def test_words_through_langchain(srv: FakeOpenAI) -> None:
    srv.stream_words = True
    srv.script(" leading space\tand tabs ", "   ")
    model = ChatOpenAI(base_url=srv.base_url, api_key="test", max_retries=0)  # type: ignore[arg-type]
    pieces = [c.content for c in model.stream("x") if c.content]
    assert pieces == [" leading ", "space\t", "and ", "tabs "]
    assert [c.content for c in model.stream("y") if c.content] == ["   "]  # whitespace only
    # Without stream_delay nothing waits, and without stream_words the chunks are characters.
    srv.stream_words = False
    srv.script("y" * 20)
    assert [c.content for c in model.stream("z") if c.content] == ["y" * 16, "y" * 4]


async def test_client_gone_mid_stream_is_counted(srv: FakeOpenAI) -> None:
    srv.stream_delay = 0.2
    srv.stream_words = True
    srv.script(" ".join(f"w{i}" for i in range(50)))  # ten seconds if read to the end
    async with client(srv) as sdk:
        stream = await sdk.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        seen = []
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                seen.append(chunk.choices[0].delta.content)
            if len(seen) == 2:
                break
        await stream.close()  # what cancelling the model call does to the connection
    await wait_until(lambda: srv.cancelled_streams == 1 and srv.in_flight == 0)
    assert seen == ["w0 ", "w1 "] and len(srv.timings) == 1
    # The server goes on serving; a stream read to the end is not counted.
    srv.stream_delay = 0.0
    _, pieces = await stream_pieces(srv)
    await wait_until(lambda: srv.in_flight == 0)
    assert pieces and srv.cancelled_streams == 1


async def test_cancelled_task_before_the_first_token_is_counted(srv: FakeOpenAI) -> None:
    srv.delay_next(1, 30.0)
    async with client(srv) as sdk:
        call = asyncio.create_task(
            sdk.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )
        await wait_until(lambda: srv.in_flight == 1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    await wait_until(lambda: srv.cancelled_streams == 1 and srv.in_flight == 0)


async def test_dropped_connection_and_plain_calls_are_not_cancelled_streams(
    srv: FakeOpenAI,
) -> None:
    srv.close_connection_next(1)
    async with client(srv) as sdk:
        with pytest.raises(openai.APIConnectionError):
            await sdk.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        srv.delay_next(1, 30.0)
        with pytest.raises(openai.APITimeoutError):
            await sdk.with_options(timeout=0.3).chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "hi"}]
            )
    await wait_until(lambda: srv.in_flight == 0)
    assert srv.cancelled_streams == 0  # neither a stream the client cut
    srv.cancelled_streams = 3
    srv.stream_delay, srv.stream_words = 1.0, True
    srv.reset()
    assert (srv.cancelled_streams, srv.stream_delay, srv.stream_words) == (0, 0.0, False)


async def test_a_request_ending_after_a_reset_leaves_the_new_records_alone(
    srv: FakeOpenAI,
) -> None:
    """A previous test's request that ends after the next test's reset adds no timing and
    no cancelled stream to that test's records."""
    srv.stream_delay = 0.2
    srv.stream_words = True
    srv.script("a b c d e f g h")
    async with client(srv) as sdk:
        stream = await sdk.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                break
        srv.reset()  # what the next test's fixture does while this stream is still open
        await stream.close()
    await wait_until(lambda: srv.in_flight == 0)
    assert srv.timings == [] and srv.cancelled_streams == 0 and srv.requests == []
