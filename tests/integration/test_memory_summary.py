"""Inside a conversation (seed 002): incremental summaries, typed facts, /forget, budgets.

The summary model is the local server under its own name, so `requests_for` separates
its requests from the chat model's, and their size is counted on what the server got.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest

from src.graph import prompts
from src.graph.main_graph import make_tools
from src.graph.memory.facts import extract_pending
from src.graph.memory.summarizer import PROMPT_RESERVE, summarize_due, summary_limits
from src.graph.tokens import PER_MESSAGE_OVERHEAD, ApproxCounter, count_tools
from src.services.agent_service import Identity
from tests.fakes.openai_server import echo_reply, message_text

COUNTER = ApproxCounter()
ANNA = Identity(5101, "anna", "Anna", "ru")
SUMM = "summary-model"


def tokens_of(request: dict[str, Any]) -> int:
    return sum(COUNTER.count(message_text(m)) + PER_MESSAGE_OVERHEAD for m in request["messages"])


def is_facts(request: dict[str, Any]) -> bool:
    return request["messages"][0]["content"] == prompts.FACTS_SYSTEM


def greedy_summary(request: dict[str, Any]) -> str:
    """A summary model that forgets nothing unless told to shorten: old summary plus every
    new line, whatever length it was asked for; asked to shorten, its newest words, as
    many as asked for (a summary is never stored cut, so it has to shorten)."""
    prompt = request["messages"][-1]["content"]
    if "Current summary" not in prompt:
        summary = prompt.split("Summary:\n", 1)[1].split("\n\nAnswer with")[0]
        words = int(re.search(r"at most about (\d+) words", prompt).group(1))  # type: ignore[union-attr]
        return " ".join(summary.split()[-words:])
    old = prompt.split("Current summary (empty at first):\n", 1)[1].split("\n\nNew messages:")[0]
    new = prompt.split("New messages:\n", 1)[1].split("\n\nRules:")[0]
    return ("" if old == "(empty)" else old + "\n") + new


FACT_MARKERS = {
    "Меня зовут Анна": {"key": "name", "value": "Анна", "type": "fact", "importance": 9},
    "Я живу в Самаре": {"key": "city", "value": "Самара", "type": "fact", "importance": 7},
    "переехала в Казань": {"key": "city", "value": "Казань", "type": "fact", "importance": 7},
    "люблю улун": {"key": "tea", "value": "улун", "type": "preference", "importance": 6},
    "виновата база": {
        "key": "slow_service",
        "value": "Анна думает, что тормозит база",
        "type": "hypothesis",
        "importance": 6,
    },
}


def fake_models(request: dict[str, Any]) -> str:
    """Route requests: the summary model extracts facts by marker and summarizes; the
    chat model echoes."""
    if request.get("model") != SUMM:
        return echo_reply(request)
    prompt = request["messages"][-1]["content"]
    if is_facts(request):
        found = [f for marker, f in FACT_MARKERS.items() if marker in prompt]
        return "Конечно! ```json\n" + json.dumps(found, ensure_ascii=False) + "\n```"
    return greedy_summary(request)


async def conversation(rt: Any, owner: int) -> uuid.UUID:
    conv: uuid.UUID = await rt.deps.conversations.get_or_create_conversation(owner)
    return conv


@pytest.mark.slow
async def test_summarizer_input_stays_bounded_over_300_turns(
    runtime_factory: Any, llm: Any
) -> None:
    """Each turn stores a user message and an answer and runs the summarize step, as the
    graph does after a reply; the summary model keeps everything it is given."""
    rt = await runtime_factory(summary_model=SUMM)
    llm.default_reply = fake_models
    repo = rt.deps.conversations
    await rt.deps.users.get_or_create(ANNA.owner_id)
    conv = await conversation(rt, ANNA.owner_id)
    history = 0
    sizes: dict[int, int] = {}
    for turn in range(1, 301):
        user = f"[Текущее время: 2025-01-01 10:00] Вопрос {turn}: " + "как лучше сделать? " * (
            3 + turn % 9
        )
        reply = f"Ответ {turn}. " + "Сначала определим цель, затем сравним варианты. " * (
            1 + turn % 5
        )
        for role, text in (("user", user), ("assistant", reply)):
            await repo.append_message(conv, role, text)
            history += COUNTER.count(text) + PER_MESSAGE_OVERHEAD
        await summarize_due(rt.deps, ANNA.owner_id, conv)
        sizes[turn] = history

    requests = llm.requests_for(SUMM)
    updates = [tokens_of(r) for r in requests if not is_facts(r)]
    assert len(updates) >= 50
    assert not any(is_facts(r) for r in requests)  # facts have runs of their own
    limits = summary_limits(rt.settings)
    bound = limits.summary + limits.batch + PROMPT_RESERVE
    assert max(updates) <= bound
    # The history grew about 6x from turn 50 to 300; the summarizer's input did not.
    assert sizes[300] > 5 * sizes[50]
    late, settled = updates[-10:], updates[10:20]
    assert max(late) <= 1.1 * max(settled)
    stored = (await repo.get_conversation(conv))["summary"]
    assert COUNTER.count(stored) <= limits.summary
    assert stored.rstrip().endswith((".", "?", "!", "?"))  # cut on a sentence


ANNA_SAYS = (
    "Меня зовут Анна.",
    "Я живу в Самаре.",
    "Я очень люблю улун.",
    "Кажется, виновата база, сервис тормозит.",
    "Кстати, я переехала в Казань.",
    "ок",
    "ок",
    "ок",
    "ок",
)


async def test_facts_extracted_merged_and_labelled(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(max_context=4, summary_trigger=2, summary_model=SUMM, facts_every=2)
    llm.default_reply = fake_models
    for text in ANNA_SAYS:
        assert (await rt.service.handle_message(ANNA, text)).ok
        await rt.service.drain()

    facts = {f["key"]: f for f in await rt.deps.memory.facts_with_previous(ANNA.owner_id)}
    assert set(facts) == {"name", "city", "tea", "slow_service"}
    assert facts["city"]["value"] == "Казань" and facts["city"]["previous_value"] == "Самара"
    changes = await rt.deps.memory.fact_changes(ANNA.owner_id)
    assert [(c["key"], c["old_value"], c["new_value"]) for c in changes] == [
        ("city", "Самара", "Казань")
    ]
    conv = await conversation(rt, ANNA.owner_id)
    assert all(f["source_conversation_id"] == conv for f in facts.values())
    # Every user message reached fact extraction exactly once, in order.
    extracted = [
        line
        for r in llm.requests_for(SUMM)
        if is_facts(r)
        for line in r["messages"][-1]["content"].split("Messages:\n")[1].splitlines()
        if line.startswith("[user]: ")
    ]
    # (FACTS_EVERY=2: the ninth waits for a tenth.)
    assert [line.split("] ", 2)[-1] for line in extracted] == list(ANNA_SAYS[:8])

    await rt.service.handle_message(ANNA, "Посоветуй, какой чай заварить вечером")
    sent = llm.requests_for("gpt-4o-mini")[-1]["messages"]
    system, current = sent[0]["content"], sent[-1]["content"]
    assert "- name: Анна" in system and "- city: Казань" in system
    assert system.index("- name: Анна") < system.index("- city: Казань")  # importance 9 > 7
    # Tastes and guesses follow the message they may personalize, not the system prompt.
    assert "[preference]" not in system and "[hypothesis]" not in system
    assert "- [preference] tea: улун" in current and "[hypothesis] slow_service" in current

    await rt.service.handle_message(ANNA, "Проанализируй объективно, почему тормозит сервис")
    sent = llm.requests_for("gpt-4o-mini")[-1]["messages"]
    assert "- [preference]" not in sent[0]["content"] and "- name: Анна" in sent[0]["content"]
    current = sent[-1]["content"]
    assert "- [preference] tea" not in current and "[hypothesis]" not in current
    assert prompts.FACTS_OBJECTIVE_NOTE in current


@pytest.mark.parametrize("strategy", ["summarize", "semantic", "keyvalue"])
async def test_strategies_are_incremental(runtime_factory: Any, llm: Any, strategy: str) -> None:
    rt = await runtime_factory(
        max_context=4, summary_trigger=2, summary_model=SUMM, summary_strategy=strategy
    )
    llm.script_for(SUMM, "decision:first: one", "decision:second: two")
    repo = rt.deps.conversations
    conv = await conversation(rt, ANNA.owner_id)
    # MAX_CONTEXT=4 keeps its newest 2 unfolded (4 - 2 x a batch of 1): the rest is
    # folded ahead, while still in the window.
    for i in range(6):
        await repo.append_message(conv, "user", f"message {i}")
    assert await summarize_due(rt.deps, ANNA.owner_id, conv) == 4
    for i in range(6, 8):
        await repo.append_message(conv, "user", f"message {i}")
    assert await summarize_due(rt.deps, ANNA.owner_id, conv) == 2
    first, second = [r for r in llm.requests_for(SUMM) if not is_facts(r)]
    instruction = prompts.SUMMARY_INSTRUCTIONS[strategy].splitlines()[0]
    assert instruction in first["messages"][-1]["content"]
    # The second call sees the previous summary and only the new overflow.
    prompt = second["messages"][-1]["content"]
    assert "decision:first: one" in prompt
    assert "message 4" in prompt and "message 5" in prompt and "message 3" not in prompt
    assert (await repo.get_conversation(conv))["summary"] == "decision:second: two"


async def test_unreadable_facts_are_dropped_and_the_batch_marked(
    runtime_factory: Any, llm: Any
) -> None:
    rt = await runtime_factory(max_context=2, summary_trigger=2, summary_model=SUMM)
    llm.script_for(SUMM, "I could not find any facts, sorry!", "Summary: talked.")
    conv = await conversation(rt, ANNA.owner_id)
    for i in range(4):
        await rt.deps.conversations.append_message(conv, "user", f"m{i}")
    assert await extract_pending(rt.deps, ANNA.owner_id, conv) == 0
    assert await rt.deps.memory.list_facts(ANNA.owner_id) == []
    assert await rt.deps.conversations.facts_pending(conv, 10) == []  # not asked again
    # MAX_CONTEXT=2: all four are folded ahead.
    assert await summarize_due(rt.deps, ANNA.owner_id, conv) == 4
    assert (await rt.deps.conversations.get_conversation(conv))["summary"] == "Summary: talked."


async def test_model_error_advances_nothing(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(max_context=2, summary_trigger=2, summary_model=SUMM)
    conv = await conversation(rt, ANNA.owner_id)
    for i in range(4):
        await rt.deps.conversations.append_message(conv, "user", f"m{i}")
    llm.fail_next(2)
    with pytest.raises(Exception, match="500"):
        await summarize_due(rt.deps, ANNA.owner_id, conv)
    with pytest.raises(Exception, match="500"):
        await extract_pending(rt.deps, ANNA.owner_id, conv)
    rows = await rt.deps.conversations.load_last_messages(conv, 10)
    assert not any(r["summarized"] or r["facts_extracted"] for r in rows)
    llm.script_for(SUMM, "Summary.", '{"facts": []}')
    assert await summarize_due(rt.deps, ANNA.owner_id, conv) == 4  # the same batch, retried
    assert await extract_pending(rt.deps, ANNA.owner_id, conv) == 0
    assert await rt.deps.conversations.facts_pending(conv, 10) == []


async def test_oversized_messages_are_summarized_not_lost(runtime_factory: Any, llm: Any) -> None:
    """Messages too big for working memory count as overflow before the window is full."""
    rt = await runtime_factory(
        summary_model=SUMM, summary_trigger=2, default_context_limit=1800, llm_max_output_tokens=200
    )
    llm.default_reply = fake_models
    repo = rt.deps.conversations
    conv = await conversation(rt, ANNA.owner_id)
    ids = []
    for i in range(12):
        row = await repo.append_message(conv, "user", f"Большое сообщение {i}. " + "слово " * 150)
        ids.append(row["id"])
    assert 12 < rt.settings.max_context
    # As the graph calls it: the tools' schemas take their share of the budget.
    reserve = count_tools(make_tools(rt.deps), rt.deps.counter)
    folded = await summarize_due(rt.deps, ANNA.owner_id, conv, None, reserve)
    assert folded >= 8
    summarized = {r["id"] for r in await repo.load_last_messages(conv, 20) if r["summarized"]}
    assert "Большое сообщение 0." in llm.requests_for(SUMM)[0]["messages"][-1]["content"]
    # What the summary does not cover fits working memory: nothing falls in between.
    await rt.deps.users.get_or_create(ANNA.owner_id)
    await rt.service.handle_message(ANNA, "и что?")
    sent = " ".join(m["content"] for m in llm.requests_for("gpt-4o-mini")[-1]["messages"])
    for i, message_id in enumerate(ids):
        assert message_id in summarized or f"Большое сообщение {i}." in sent, i


async def test_forget_leaves_only_the_system_prompt(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(max_context=4, summary_trigger=2, summary_model=SUMM)
    llm.default_reply = fake_models
    for i in range(8):
        await rt.service.handle_message(ANNA, f"секрет-{i}")
        await rt.service.drain()
    conv = await conversation(rt, ANNA.owner_id)
    assert (await rt.deps.conversations.get_conversation(conv))["summary"]
    await rt.service.forget(ANNA)
    seen = len(llm.requests_for(SUMM))

    await rt.service.handle_message(ANNA, "привет")
    request = llm.requests_for("gpt-4o-mini")[-1]
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][0]["content"] == prompts.SYSTEM_PROMPT
    for i in range(8):
        await rt.service.handle_message(ANNA, f"после-{i}")
        await rt.service.drain()
    everything = " ".join(
        m["content"]
        for r in llm.requests[-3:] + llm.requests_for(SUMM)[seen:]
        for m in r["messages"]
    )
    assert not re.search(r"секрет-\d", everything)
