"""Recall stays in its topic: search_history and recall_previous_conversations look in the
current topic of a chat, say so, and reach the chat's other topics only when asked."""

from __future__ import annotations

import json
from typing import Any

from src.graph.tools import TOPIC_SCOPE_NOTE
from src.services.agent_service import Identity

GROUP = -100_820_000
CATS, TRIPS = 11, 22


def tools_asking(scope: str | None) -> Any:
    """Ask for both recall tools (with `scope` when given); answer once they ran."""

    def model(request: dict[str, Any]) -> Any:
        if request["messages"][-1]["role"] == "tool":
            return "done"
        extra = {"scope": scope} if scope else {}
        return {
            "tool_calls": [
                {"name": "search_history", "args": {"query": "banana"} | extra},
                {"name": "recall_previous_conversations", "args": extra},
            ]
        }

    return model


async def seed_topic(rt: Any, topic: int, word: str) -> None:
    """Store a message and a compact in one topic of the group."""
    deps = rt.deps
    conversation = await deps.conversations.get_or_create_conversation(GROUP, topic=topic)
    await deps.conversations.append_message(conversation, "user", f"a banana of {word}")
    await deps.conversations.append_message(conversation, "assistant", "noted")
    await deps.memory.add_compact(GROUP, conversation, f"Talked of {word}.", [], "")


def tool_results(llm: Any) -> str:
    """Return what the tools of the last model request answered (its trailing tool
    messages: earlier ones are the history)."""
    results: list[str] = []
    for message in reversed(llm.requests[-1]["messages"]):
        if message["role"] != "tool":
            break
        results.append(message["content"])
    return "\n".join(results)


async def test_recall_in_a_topic_stays_there_unless_asked_for_the_chat(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory(summary_trigger=1000)
    await rt.deps.users.get_or_create(GROUP)
    await seed_topic(rt, CATS, "whiskers")
    await seed_topic(rt, TRIPS, "kazan")
    in_trips = Identity(GROUP, topic_id=TRIPS)

    llm.default_reply = tools_asking(None)
    assert (await rt.service.handle_message(in_trips, "what banana?")).ok
    found = tool_results(llm)
    assert "kazan" in found and "whiskers" not in found
    assert found.count(TOPIC_SCOPE_NOTE.strip()) == 2  # each tool says it stayed in the topic
    # The turn's own prompt holds this topic's compact only.
    system = llm.requests[0]["messages"][0]["content"]
    assert "Talked of kazan." in system and "whiskers" not in system

    llm.default_reply = tools_asking("chat")
    assert (await rt.service.handle_message(in_trips, "and elsewhere?")).ok
    found = tool_results(llm)
    assert "kazan" in found and "whiskers" in found
    assert TOPIC_SCOPE_NOTE.strip() not in found


async def test_a_chat_without_topics_searches_as_before_without_a_note(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory(summary_trigger=1000)
    await rt.deps.users.get_or_create(GROUP)
    await seed_topic(rt, 0, "general")
    llm.default_reply = tools_asking(None)
    assert (await rt.service.handle_message(Identity(GROUP), "what banana?")).ok
    found = tool_results(llm)
    assert "a banana of general" in found and "Talked of general." in found
    assert TOPIC_SCOPE_NOTE.strip() not in found
    assert json.dumps(found)  # plain text for the model
