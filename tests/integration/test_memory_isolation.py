"""One user's facts, compacts and history never reach another user's turn (100 users)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from src.services.agent_service import Identity
from tests.fakes.openai_server import message_text

USERS = range(8000, 8100)
SECRET = re.compile(r"secret-(\d+)-")
OWNER = re.compile(r"u(\d+): ")


def model(request: dict[str, Any]) -> Any:
    """Ask for both memory tools on the user's message; answer once they ran."""
    last = request["messages"][-1]
    if last["role"] == "tool":
        return "done"
    return {
        "tool_calls": [
            {"name": "search_history", "args": {"query": "banana secret"}},
            {"name": "recall_previous_conversations", "args": {}},
        ]
    }


async def seed_user(rt: Any, owner: int) -> None:
    deps = rt.deps
    await deps.users.get_or_create(owner)
    await deps.memory.upsert_fact(owner, "code", f"secret-{owner}-fact", "fact", 9)
    await deps.memory.upsert_fact(owner, "taste", f"secret-{owner}-pref", "preference", 8)
    await deps.memory.add_compact(owner, None, f"Talked about secret-{owner}-compact.", [], "")
    old = await deps.conversations.get_or_create_conversation(owner)
    await deps.conversations.append_message(old, "user", f"my banana is secret-{owner}-message")
    await deps.conversations.append_message(old, "assistant", "noted")


@pytest.mark.slow
async def test_hundred_users_see_only_their_own_memory(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(summary_trigger=1000)
    llm.default_reply = model
    for owner in USERS:
        await seed_user(rt, owner)

    results = await asyncio.gather(
        *(
            rt.service.handle_message(Identity(owner), f"u{owner}: what do you know?")
            for owner in USERS
        )
    )
    assert all(r.ok and r.tools_used for r in results)

    seen: dict[int, set[str]] = {owner: set() for owner in USERS}
    for request in llm.requests:
        users = [m for m in request["messages"] if m["role"] == "user"]
        owner = int(OWNER.findall(message_text(users[-1]))[-1])
        everything = " ".join(message_text(m) for m in request["messages"])
        assert {int(n) for n in SECRET.findall(everything)} == {owner}, owner
        tools = " ".join(m["content"] for m in request["messages"] if m["role"] == "tool")
        seen[owner].update(kind for kind in ("message", "compact") if f"-{kind}" in tools)
        system = request["messages"][0]["content"]
        if f"secret-{owner}-fact" in system and f"secret-{owner}-compact" in system:
            seen[owner].add("prompt")
    # Each user's own memory did reach their turn: the check above is not vacuous.
    assert all(kinds == {"message", "compact", "prompt"} for kinds in seen.values()), seen
