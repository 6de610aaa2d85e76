"""FRS (seed 003) end to end: AgentService, the graph, real Postgres, the local model server."""

from __future__ import annotations

import re
import sys
import uuid
from typing import Any

from src.graph.context.render import ROLE_LABELS
from src.services.agent_service import Identity
from src.services.texts import t
from tests.fakes.memory_model import MEMORY_MODEL
from tests.fakes.openai_server import message_text

ALICE = Identity(301, "alice", "Alice", "ru")
BOB = Identity(302, "bob", "Bob", "en")
STAMP = re.compile(r"\[Текущее время: [^\]]+\] ")


def call(name: str, **args: Any) -> dict[str, Any]:
    """A scripted model answer asking for one tool."""
    return {"tool_calls": [{"name": name, "args": args}]}


def chat_requests(llm: Any) -> list[dict[str, Any]]:
    """Return the requests to the chat model (the memory model extracts facts in between)."""
    return [r for r in llm.requests if r.get("model") != MEMORY_MODEL]


def numbered(request: dict[str, Any]) -> list[str]:
    """The request's messages after the system prompt, time stamps removed."""
    return [STAMP.sub("", m["content"] or "") for m in request["messages"][1:]]


def tool_results(request: dict[str, Any]) -> list[str]:
    """This turn's tool results (earlier turns' are numbered `[i] Tool:`)."""
    return [
        m["content"]
        for m in request["messages"]
        if m["role"] == "tool" and not re.match(r"\[\d+\] Tool: ", m["content"])
    ]


def request_tokens(request: dict[str, Any], counter: Any) -> int:
    """Tokens of the messages a request carries (tool schemas excluded)."""
    return sum(counter.count(message_text(m)) + 4 for m in request["messages"])


async def stored(pool: Any, conversation_id: uuid.UUID) -> list[dict[str, Any]]:
    """Every message of the conversation, squashed ones included, in thread order."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT * FROM messages WHERE conversation_id = %s ORDER BY created_at, id",
            (conversation_id,),
        )
        return list(await cur.fetchall())


async def squash_log(pool: Any, conversation_id: uuid.UUID) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT * FROM squash_log WHERE conversation_id = %s ORDER BY id", (conversation_id,)
        )
        return list(await cur.fetchall())


def text_of(row: dict[str, Any]) -> str:
    return STAMP.sub("", row["content"])


async def seed_abc(rt: Any, llm: Any, who: Identity = ALICE) -> uuid.UUID:
    """Store A (user), B (assistant), C (user, its turn failed): D will be the current one."""
    llm.script("B")
    assert (await rt.service.handle_message(who, "A")).reply == "B"
    llm.fail_next(1, status=500)
    assert not (await rt.service.handle_message(who, "C")).ok
    return await rt.deps.conversations.get_or_create_conversation(who.owner_id)


# --- the seed's example -------------------------------------------------------------------


async def test_seed_example_relative(runtime_factory: Any, llm: Any, pool: Any) -> None:
    rt = await runtime_factory()
    conv = await seed_abc(rt, llm)
    llm.script(call("compress_range", **{"from": 2, "to": 3, "summary": "BC"}))
    llm.script(call("view_thread"), "Готово")
    result = await rt.service.handle_message(ALICE, "D")
    assert result.ok and result.reply == "Готово"
    assert result.tools_used == ["compress_range", "view_thread"]
    first, second, third = chat_requests(llm)[-3:]

    # What the model was offered: a parameter literally named `from`.
    offered = {f["function"]["name"]: f["function"] for f in first["tools"]}
    params = offered["compress_range"]["parameters"]
    assert list(params["properties"]) == ["from", "to", "summary"]
    assert params["required"] == ["from", "to", "summary"]

    assert numbered(first) == ["[1] User: A", "[2] Assistant: B", "[3] User: C", "[4] User: D"]
    # The rest of the turn already sees A, BC, D.
    assert numbered(second)[:3] == ["[1] User: A", "[2] Summary: BC", "[3] User: D"]
    assert tool_results(second)[0].startswith("Compressed positions 2-3 (2 messages")
    view = tool_results(third)[1]
    assert view.startswith("Thread (3 messages, ~")
    assert "positions 1-3" in view and "Compressible: positions 1-2." in view
    lines = view.splitlines()[1:4]
    assert [line.split(",")[0] for line in lines] == ["[1] User", "[2] Summary", "[3] User"]
    assert lines[1].endswith(": BC") and "latest message" in lines[2]

    rows = await stored(pool, conv)
    live = [(r["role"], text_of(r)) for r in rows if r["squashed_at"] is None]
    assert live[:3] == [("user", "A"), ("assistant", "BC"), ("user", "D")]
    squashed = [r for r in rows if r["squashed_at"] is not None]
    assert [(r["number"], text_of(r)) for r in squashed] == [(2, "B"), (3, "C")]
    (log,) = await squash_log(pool, conv)
    summary = next(r for r in rows if r["role"] == "assistant" and r["content"] == "BC")
    assert log["replaced_ids"] == [r["id"] for r in squashed]
    assert log["replaced_numbers"] == [2, 3] and log["summary"] == "BC"
    assert log["requested_by"] == "model" and log["summary_message_id"] == summary["id"]
    assert all(r["squash_id"] == log["id"] for r in squashed)
    assert summary["meta"]["frs_summary"]["squash_id"] == log["id"]

    # The next turn's request no longer carries B and C.
    llm.script("ok")
    await rt.service.handle_message(ALICE, "E")
    body = numbered(llm.last_request())
    assert body[:3] == ["[1] User: A", "[2] Summary: BC", "[3] User: D"]
    assert body[-1] == f"[{len(body)}] User: E"
    assert not any(line.endswith(": B") or line.endswith(": C") for line in body)


async def test_seed_example_absolute(runtime_factory: Any, llm: Any, pool: Any) -> None:
    rt = await runtime_factory(frs_numbering="absolute")
    conv = await seed_abc(rt, llm)
    llm.script(call("compress_range", **{"from": 2, "to": 3, "summary": "BC"}))
    llm.script(call("view_thread"), "Готово")
    await rt.service.handle_message(ALICE, "D")
    first, second, third = chat_requests(llm)[-3:]
    offered = {f["function"]["name"]: f["function"] for f in first["tools"]}
    assert "numbers" in offered["compress_range"]["parameters"]["properties"]["from"]["description"]
    assert numbered(first) == ["[1] User: A", "[2] Assistant: B", "[3] User: C", "[4] User: D"]
    assert numbered(second)[:3] == ["[1] User: A", "[2] Summary: BC", "[4] User: D"]
    assert "The summary is number 2" in tool_results(second)[0]
    view = tool_results(third)[1]
    assert "message numbers 1-2, 4" in view
    assert [line.split(",")[0] for line in view.splitlines()[1:4]] == [
        "[1] User",
        "[2] Summary",
        "[4] User",
    ]

    rows = await stored(pool, conv)
    live = [(r["number"], text_of(r)) for r in rows if r["squashed_at"] is None]
    assert live[:3] == [(1, "A"), (2, "BC"), (4, "D")]
    assert [(r["number"], text_of(r)) for r in rows if r["squashed_at"]] == [(2, "B"), (3, "C")]
    numbers = [n for n, _ in live]
    assert len(numbers) == len(set(numbers))  # unique among live messages

    llm.script("ok")
    await rt.service.handle_message(ALICE, "E")
    body = numbered(llm.last_request())
    assert body[:3] == ["[1] User: A", "[2] Summary: BC", "[4] User: D"]
    conversation = await rt.deps.conversations.get_conversation(conv)
    # E took the number before its reply's, the last one given out
    assert body[-1] == f"[{conversation['next_message_number'] - 2}] User: E"


# --- a long tool result, compressed -------------------------------------------------------


async def seed_report_search(rt: Any, llm: Any, pool: Any, who: Identity) -> uuid.UUID:
    """An earlier conversation holds 40 long reports; this one searched them (turn 1)."""
    old = await rt.deps.conversations.get_or_create_conversation(who.owner_id)
    for i in range(40):
        words = " ".join(f"revenue{i}-{j}" for j in range(60))
        await rt.deps.conversations.append_message(old, "user", f"Quarterly report {i}: {words}")
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO conversations (id, telegram_user_id) VALUES (%s, %s)",
            (uuid.uuid4(), who.owner_id),
        )
    llm.script(call("search_history", query="report", limit=40), "Found 40 quarterly reports.")
    await rt.service.handle_message(who, "Find my quarterly reports")
    conv = await rt.deps.conversations.get_or_create_conversation(who.owner_id)
    assert conv != old
    return conv


async def test_long_tool_result_is_compressed(
    runtime_factory: Any, llm: Any, pool: Any, capsys: Any
) -> None:
    rt = await runtime_factory()
    counter = rt.deps.counter
    conv = await seed_report_search(rt, llm, pool, BOB)

    summary = "Searched the user's history for 'report': 40 quarterly reports (0-39) exist."
    llm.script(call("compress_range", **{"from": 2, "to": 4, "summary": summary}), "Sure.")
    await rt.service.handle_message(BOB, "Which quarter was best?")
    before, after_in_turn = chat_requests(llm)[-2:]
    big = max((m["content"] for m in before["messages"] if m["role"] == "tool"), key=len)
    assert "Quarterly report" in big and len(big) > 10_000
    assert numbered(before)[1].startswith("[2] Assistant:")
    assert numbered(before)[3] == "[4] System: Tools used: search_history"
    # Within the same turn the next model call already goes without it.
    assert not any("Quarterly report" in c for c in numbered(after_in_turn))
    assert numbered(after_in_turn)[1] == f"[2] Summary: {summary}"

    llm.script("ok")
    await rt.service.handle_message(BOB, "Thanks")
    next_turn = llm.last_request()
    assert not any("Quarterly report" in c for c in numbered(next_turn))
    assert f"[2] Summary: {summary}" in numbered(next_turn)

    tokens = {
        "before (turn 2, first call)": request_tokens(before, counter),
        "after (turn 2, call after compress_range)": request_tokens(after_in_turn, counter),
        "next turn (turn 3)": request_tokens(next_turn, counter),
    }
    saved = tokens["before (turn 2, first call)"] - tokens["next turn (turn 3)"]
    assert saved > counter.count(big) * 0.8
    report = "".join(f"\n  {name}: {value}" for name, value in tokens.items())
    with capsys.disabled():  # the closing note quotes these numbers
        sys.stdout.write(f"\nFRS long tool result ({counter.name} tokens):{report}\n")
    (log,) = await squash_log(pool, conv)
    assert log["requested_by"] == "model" and len(log["replaced_ids"]) == 3
    rows = await stored(pool, conv)
    assert sum(1 for r in rows if r["squashed_at"] is not None) == 3
    big_rows = [r for r in rows if r["role"] == "tool" and "Quarterly" in r["content"]]
    assert len(big_rows) == 1 and big_rows[0]["squashed_at"] is not None


# --- guard rails --------------------------------------------------------------------------


async def test_guard_rails_are_tool_errors(runtime_factory: Any, llm: Any, pool: Any) -> None:
    rt = await runtime_factory(max_tool_rounds=20)
    llm.script(call("search_history", query="cat"), "Found nothing.")
    await rt.service.handle_message(ALICE, "my cat?")
    # [1] User, [2] Assistant (call), [3] Tool, [4] System, [5] Assistant, [6] User (current)
    attempts = [
        (call("compress_range", **{"from": 0, "to": 2, "summary": "x"}), "out of range"),
        (call("compress_range", **{"from": 2, "to": 9, "summary": "x"}), "out of range"),
        (call("compress_range", **{"from": 5, "to": 4, "summary": "x"}), "reversed"),
        (call("compress_last", count=0, summary="x"), "at least 1"),
        (call("compress_last", count=6, summary="x"), "between 1 and 5"),
        (call("compress_range", **{"from": 4, "to": 5, "summary": "  "}), "summary is empty"),
        (call("compress_range", **{"from": 5, "to": 6, "summary": "x"}), "latest message"),
        (call("compress_range", **{"from": 3, "to": 4, "summary": "x"}), "tool result"),
        (call("compress_range", **{"from": 1, "to": 2, "summary": "x"}), "end the range later"),
        (call("compress_range", to=2, summary="x"), "from"),
    ]
    for answer, _ in attempts:
        llm.script(answer)
    parallel = {
        "tool_calls": [
            {"name": "compress_range", "args": {"from": 4, "to": 5, "summary": "ok"}},
            {"name": "compress_last", "args": {"count": 1, "summary": "x"}},
        ]
    }
    llm.script(parallel, "Done.")
    result = await rt.service.handle_message(ALICE, "tidy up")
    assert result.ok and result.reply == "Done."
    results = tool_results(llm.last_request())
    assert len(results) == len(attempts) + 2
    for text, (_, needle) in zip(results, attempts, strict=False):
        assert text.startswith("Error: ") and needle in text, (needle, text)
    assert results[-2].startswith("Compressed positions 4-5")
    assert "one compression at a time" in results[-1]
    conv = await rt.deps.conversations.get_or_create_conversation(ALICE.owner_id)
    (log,) = await squash_log(pool, conv)
    assert log["replaced_numbers"] == [4, 5]
    rows = await stored(pool, conv)
    errors = [r for r in rows if r["role"] == "tool" and (r["meta"] or {}).get("status") == "error"]
    assert len(errors) == len(attempts) + 1


async def test_absolute_numbers_guard_rails(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(frs_numbering="absolute")
    await seed_abc(rt, llm)
    llm.script(call("compress_range", **{"from": 2, "to": 3, "summary": "BC"}), "ok")
    await rt.service.handle_message(ALICE, "D")  # A1 BC2 D4 ...
    llm.script(
        call("compress_range", **{"from": 3, "to": 3, "summary": "x"}),
        call("compress_range", **{"from": 1, "to": 99, "summary": "x"}),
        call("compress_range", **{"from": 4, "to": 2, "summary": "x"}),
        "ok",
    )
    await rt.service.handle_message(ALICE, "E")
    squashed, missing, reversed_ = tool_results(llm.last_request())[-3:]
    assert "message 3 was already compressed (squashed)" in squashed
    assert "Numbers in the thread: 1-2, 4-" in squashed
    assert "there is no message 99" in missing
    assert "reversed" in reversed_

    # A window of 3 messages: message 1 is live but no longer in the thread.
    small = await runtime_factory(frs_numbering="absolute", max_context=3)
    llm.script(call("compress_range", **{"from": 1, "to": 2, "summary": "x"}), "ok")
    await small.service.handle_message(ALICE, "F")
    assert "message 1 is not in the current thread" in tool_results(llm.last_request())[-1]


# --- numbering stays in the model's copy --------------------------------------------------


async def test_numbering_never_reaches_storage_or_replies(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.script("[2] Assistant: Привет!")
    result = await rt.service.handle_message(ALICE, "Привет")
    assert result.reply == "Привет!"
    conv = await rt.deps.conversations.get_or_create_conversation(ALICE.owner_id)
    rows = await rt.deps.conversations.load_last_messages(conv)
    assert [text_of(r) for r in rows] == ["Привет", "Привет!"]
    labels = "|".join(ROLE_LABELS.values())
    assert not any(re.match(rf"\[\d+\] ({labels}|Summary):", r["content"]) for r in rows)


# --- /compress ----------------------------------------------------------------------------


async def test_compress_command(runtime_factory: Any, llm: Any, pool: Any) -> None:
    rt = await runtime_factory()
    conv = await seed_report_search(rt, llm, pool, ALICE)
    llm.script("Q3 was the best.")
    await rt.service.handle_message(ALICE, "Which quarter was best?")
    # [1] User, [2] Assistant (call), [3] Tool, [4] System, [5] Assistant, [6] User, [7] Assistant
    summary = "Found 40 quarterly reports in the user's history."
    llm.script(call("compress_range", **{"from": 2, "to": 5, "summary": summary}), "Сжал.")
    result = await rt.service.compress(ALICE, "кварталы")
    request = chat_requests(llm)[-2]
    assert request["messages"][0]["content"].startswith("You manage the context")
    assert "The user's focus: кварталы." in request["messages"][-1]["content"]
    assert [c.split(":")[0] for c in numbered(request)[:-1]] == [
        "[1] User",
        "[2] Assistant",
        "[3] Tool",
        "[4] System",
        "[5] Assistant",
        "[6] User",
        "[7] Assistant",
    ]
    assert result.ok and result.compressions == 1
    assert result.messages_replaced == 4 and result.messages_saved == 3
    assert result.tokens_saved > 2000 and result.tokens_after < result.tokens_before
    assert result.reply == t(
        "compress_report",
        "ru",
        messages=3,
        tokens=result.tokens_saved,
        before=result.tokens_before,
        after=result.tokens_after,
    )
    (log,) = await squash_log(pool, conv)
    assert log["requested_by"] == "user:/compress" and log["summary"] == summary

    llm.script("ok")
    await rt.service.handle_message(ALICE, "and now?")
    body = numbered(llm.last_request())
    assert body[1] == f"[2] Summary: {summary}"
    assert not any("Quarterly report" in c for c in body)


async def test_compress_keeps_the_latest_exchange(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    for text in ("one", "two"):
        llm.script(f"re {text}")
        await rt.service.handle_message(ALICE, text)
    llm.script(call("compress_range", **{"from": 3, "to": 4, "summary": "x"}), "no")
    result = await rt.service.compress(ALICE, None)
    assert result.ok and result.compressions == 0
    assert result.reply == t("compress_declined", "ru")
    assert "latest message" in tool_results(llm.last_request())[0]


async def test_compress_with_nothing_to_compress(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory()
    llm.script("hi")
    await rt.service.handle_message(BOB, "hello")
    calls = len(llm.requests)
    result = await rt.service.compress(BOB, None)
    assert result.ok and result.reply == t("compress_nothing", "en")
    assert len(llm.requests) == calls  # the model was not asked


async def test_compress_model_failure_changes_nothing(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    rt = await runtime_factory()
    conv = await seed_abc(rt, llm)
    llm.fail_next(1, status=500)
    result = await rt.service.compress(ALICE, None)
    assert not result.ok and result.reply == t("compress_failed", "ru")
    assert await squash_log(pool, conv) == []
