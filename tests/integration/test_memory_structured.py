"""Fact extraction keeps working when the endpoint or the input does not cooperate (real
PostgreSQL, the real `ChatOpenAI` client against the local model server):

1. an endpoint that refuses `response_format` json_schema (llama-cpp-python: a 500) is
   asked in JSON mode, then plain text, and the way that works is remembered;
2. `tgagent chat` shows a failing memory call as one line, never a traceback;
3. an answer cut at its output cap keeps its complete facts, and its messages are asked
   about again in halves: none is marked whose facts were lost;
4. a message the model refuses (400) is found by halving, marked without facts and
   never sent again, while the others of its batch are learned.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from src.graph import prompts
from src.graph.memory.facts import FACTS_SCHEMA, extract_pending, read_pending
from src.graph.memory.structured import JsonAnswers
from src.graph.output_caps import FACTS_TOKENS
from src.services.agent_service import Identity
from tests.e2e.test_chat_cli import _env
from tests.fakes.memory_model import MEMORY_MODEL, memory_reply
from tests.fakes.openai_server import CHARS_PER_TOKEN, Fault, message_text

PIA = Identity(9301, "pia", "Pia", "en")
POISON = "FORBIDDEN"


def fact_requests(llm: Any) -> list[dict[str, Any]]:
    """Return the fact extraction requests the memory model got, in order."""
    return [
        r
        for r in llm.requests_for(MEMORY_MODEL)
        if message_text(r["messages"][0]) == prompts.FACTS_SYSTEM
    ]


def formats(requests: list[dict[str, Any]]) -> list[str | None]:
    return [(r.get("response_format") or {}).get("type") for r in requests]


async def facts_of(rt: Any) -> dict[str, str]:
    return {f["key"]: f["value"] for f in await rt.deps.memory.list_facts(PIA.owner_id)}


async def seeded(rt: Any, *texts: str) -> tuple[uuid.UUID, list[int]]:
    """Store `texts` as the user's messages of one conversation; return it and their ids."""
    repo = rt.deps.conversations
    conv = await repo.get_or_create_conversation(PIA.owner_id)
    rows = [await repo.append_message(conv, "user", text) for text in texts]
    return conv, [r["id"] for r in rows]


async def pending_ids(rt: Any, conv: uuid.UUID) -> list[int]:
    return [i for b in await read_pending(rt.deps, PIA.owner_id, conv) for i in b.ids]


# 1. --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "asked"),
    [
        ("json_object", ["json_schema", "json_object", "json_object"]),
        ("text", ["json_schema", "json_object", None, None]),
    ],
)
async def test_endpoint_without_json_schema_learns_facts_and_remembers(
    runtime_factory: Any, llm: Any, mode: str, asked: list[str | None]
) -> None:
    """Before: only a 400 about response_format fell back, so llama-cpp-python's 500
    failed every fact extraction."""
    llm.structured_output_mode = mode
    rt = await runtime_factory(facts_every=1)
    for text in ("my city is Paris", "my dog is Rex"):
        assert (await rt.service.handle_message(PIA, text)).ok
        await rt.service.drain()
    assert await facts_of(rt) == {"city": "Paris", "dog": "Rex"}
    # The second extraction went straight to what works: no json_schema request.
    assert formats(fact_requests(llm)) == asked


async def test_transient_500_demotes_nothing(runtime_factory: Any, llm: Any) -> None:
    llm.script_for(MEMORY_MODEL, Fault(500))
    rt = await runtime_factory(facts_every=1)
    for text in ("my city is Paris", "my dog is Rex"):
        assert (await rt.service.handle_message(PIA, text)).ok
        await rt.service.drain()
    assert await facts_of(rt) == {"city": "Paris", "dog": "Rex"}  # retried, nothing lost
    assert formats(fact_requests(llm)) == ["json_schema", "json_schema"]


async def test_the_way_is_remembered_per_endpoint_and_model(llm: Any) -> None:
    llm.structured_output_mode = "json_object"
    llm.default_reply = '{"facts": []}'
    answers = JsonAnswers()
    messages = [SystemMessage(prompts.FACTS_SYSTEM), HumanMessage("[user]: hi")]
    # The fake serves both paths: two endpoints for the client.
    endpoints = [llm.base_url, llm.base_url.removesuffix("/v1")]
    for base, name in [(endpoints[0], "m1"), (endpoints[1], "m1"), (endpoints[0], "m2")]:
        model = ChatOpenAI(model=name, base_url=base, api_key="k", max_retries=0)  # type: ignore[arg-type]
        for _ in range(2):
            assert (await answers.ask(model, messages, FACTS_SCHEMA))[0] == {"facts": []}
    assert formats(llm.requests) == ["json_schema", "json_object", "json_object"] * 3


# 2. --------------------------------------------------------------------------------


def run_chat(env: dict[str, str], cwd: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "src.cli", *options, "chat", "--user-id", "44", "--lang", "en"],
        input="my city is Paris\nmy dog is Rex\nmy car is a Volvo\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


@pytest.mark.slow
async def test_chat_shows_a_failing_memory_call_as_one_line(
    pool: Any, fresh_schema: str, llm: Any, tmp_path: Path
) -> None:
    """Before: every failed memory call printed its whole traceback on the terminal."""
    llm.default_for(MEMORY_MODEL, Fault(500))
    env = _env(
        fresh_schema,
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        SUMMARY_MODEL=MEMORY_MODEL,
        FACTS_EVERY="1",
        LLM_MAX_RETRIES="0",
        EMBEDDING_PROVIDER="off",
    )
    out = run_chat(env, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr + out.stdout, out.stderr
    assert len(out.stdout.splitlines()) == 3  # the replies
    # One line per failure (a back-off may skip later tries), saying what failed and how.
    failures = [line for line in out.stderr.splitlines() if "fact extraction" in line]
    assert failures and all("500" in line for line in failures), out.stderr
    assert all(len(line) < 400 for line in out.stderr.splitlines()), out.stderr
    # Asked for, DEBUG logging still shows them.
    debug = run_chat(env, tmp_path, "--log-level", "DEBUG")
    assert debug.returncode == 0 and "Traceback" in debug.stderr


# 3. --------------------------------------------------------------------------------

# Each fact's value is padded so that four facts overflow the facts answer's cap.
PAD = "x" * 1600


def padded_reply(request: dict[str, Any]) -> str:
    """Answer as the memory model, with every fact's value long."""
    answer = json.loads(memory_reply(request))
    for fact in answer["facts"]:
        fact["value"] += " " + PAD
    return json.dumps(answer)


@pytest.mark.parametrize("structured", ["auto", "off"])
async def test_cut_answer_keeps_its_facts_and_marks_only_what_survived(
    runtime_factory: Any, llm: Any, caplog: pytest.LogCaptureFixture, structured: str
) -> None:
    """Before: a cut answer marked the whole batch extracted and stored nothing."""
    llm.default_for(MEMORY_MODEL, padded_reply)
    assert 3 * len(PAD) < FACTS_TOKENS * CHARS_PER_TOKEN < 4 * len(PAD)
    rt = await runtime_factory(structured_output=structured)
    conv, (first, many, last) = await seeded(
        rt,
        "my city is Paris",
        "my dog is Rex. my cat is Tom. my car is Volvo. my boat is Lili",
        "my job is nurse",
    )
    with caplog.at_level(logging.WARNING):
        await extract_pending(rt.deps, PIA.owner_id, conv)
    # (A value is stored cut to one line of 200 characters: the padding is cut.)
    stored = {k: v.split(" ")[0] for k, v in (await facts_of(rt)).items()}
    # Only the boat was lost: the fourth fact of a message whose own answer was cut.
    assert stored == {"city": "Paris", "dog": "Rex", "cat": "Tom", "car": "Volvo", "job": "nurse"}
    assert await pending_ids(rt, conv) == []
    # Asked: all three (cut), the first (whole), the last two (cut), then each alone.
    assert len(fact_requests(llm)) == 5
    cut = [r.getMessage() for r in caplog.records if "cut at its output cap" in r.getMessage()]
    assert len(cut) == 1 and f"[{many}]" in cut[0] and "Rex" not in cut[0]


async def test_cut_answer_with_a_transient_failure_after_it_marks_nothing(
    runtime_factory: Any, llm: Any
) -> None:
    """What the halves did not finish stays pending; the complete facts are kept."""
    llm.script_for(MEMORY_MODEL, padded_reply, Fault(503))
    llm.default_for(MEMORY_MODEL, padded_reply)
    rt = await runtime_factory()
    conv, ids = await seeded(
        rt, "my city is Paris. my dog is Rex", "my cat is Tom. my car is Volvo"
    )
    with pytest.raises(Exception, match="503"):
        await extract_pending(rt.deps, PIA.owner_id, conv)
    assert set(await facts_of(rt)) == {"city", "dog", "cat"}  # before the cut
    assert await pending_ids(rt, conv) == ids
    await extract_pending(rt.deps, PIA.owner_id, conv)
    assert set(await facts_of(rt)) == {"city", "dog", "cat", "car"}
    assert await pending_ids(rt, conv) == []


# 4. --------------------------------------------------------------------------------


def refusing_reply(request: dict[str, Any]) -> Any:
    """Answer as the memory model, but refuse (400) any request carrying the poison."""
    if any(POISON in message_text(m) for m in request["messages"]):
        return Fault(400)
    return memory_reply(request)


async def test_refused_message_is_quarantined_and_the_rest_learned(
    runtime_factory: Any, llm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the batch's 400 propagated, so none of its facts was ever learned and the
    same poison batch was sent again on every turn."""
    llm.default_for(MEMORY_MODEL, refusing_reply)
    rt = await runtime_factory()
    conv, (_, poison, _, _) = await seeded(
        rt, "my city is Paris", f"my dog is Rex {POISON}", "my car is Volvo", "my job is nurse"
    )
    with caplog.at_level(logging.WARNING):
        await extract_pending(rt.deps, PIA.owner_id, conv)
    assert await facts_of(rt) == {"city": "Paris", "car": "Volvo", "job": "nurse"}
    assert await pending_ids(rt, conv) == []
    # All four (refused), the first two (refused), the first, the second (refused), the
    # last two.
    assert len(fact_requests(llm)) == 5
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and f"[{poison}]" in warnings[0], warnings
    assert POISON not in warnings[0] and "Rex" not in warnings[0]

    await seeded(rt, "my tea is oolong")
    await extract_pending(rt.deps, PIA.owner_id, conv)
    later = fact_requests(llm)[5:]
    assert len(later) == 1 and POISON not in message_text(later[0]["messages"][-1])
    assert (await facts_of(rt))["tea"] == "oolong"


async def test_transient_error_marks_nothing(runtime_factory: Any, llm: Any) -> None:
    llm.script_for(MEMORY_MODEL, Fault(502))
    rt = await runtime_factory()
    conv, ids = await seeded(rt, "my city is Paris", "my dog is Rex")
    with pytest.raises(Exception, match="502"):
        await extract_pending(rt.deps, PIA.owner_id, conv)
    assert await pending_ids(rt, conv) == ids and len(fact_requests(llm)) == 1
    await extract_pending(rt.deps, PIA.owner_id, conv)
    assert await facts_of(rt) == {"city": "Paris", "dog": "Rex"}
