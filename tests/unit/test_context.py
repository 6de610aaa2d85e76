"""The context builder (seed 002): layers and budgets, facts, summary, selection, /forget."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from src.config import Settings
from src.graph import prompts
from src.graph.context.assemble import build_context
from src.graph.context.budget import Layers, truncate_start, truncate_text
from src.graph.context.render import WIDEST_LABEL, render_row, row_tokens
from src.graph.context.sections import facts_sections, needs_objectivity, system_sections
from src.graph.tokens import PER_MESSAGE_OVERHEAD, ApproxCounter, count_messages, message_text

COUNTER = ApproxCounter()
CONV = "11111111-1111-1111-1111-111111111111"


def settings(**overrides: Any) -> Settings:
    return Settings(_env_file=None, **overrides)  # type: ignore[call-arg]


def row(i: int, role: str, content: str, **meta: Any) -> dict[str, Any]:
    return {"id": i, "number": i, "role": role, "content": content, "meta": meta or None}


def state(**values: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "user_id": 1,
        "conversation_id": CONV,
        "input_text": "[Текущее время: 2025-01-01 10:00] что дальше?",
        "input_message_id": 1000,
        "input_number": 1000,
        "history": [],
        "summary": "",
        "facts": [],
        "compacts": [],
    }
    return base | values


def fact(key: str, value: str, kind: str = "fact", importance: int = 5) -> dict[str, Any]:
    return {"key": key, "value": value, "type": kind, "importance": importance}


# --- budgets ---------------------------------------------------------------------------


def test_layers_split_the_input_budget() -> None:
    s = settings(model_context_limits={"big": 128_000}, llm_max_output_tokens=4096)
    layers = Layers.for_model(s, "big")
    assert layers.total == 128_000 - 4096
    assert (layers.system, layers.facts, layers.summary, layers.working) == (
        12390,
        12390,
        24780,
        74342,
    )
    assert Layers.for_model(s, "unknown").total == 16_000 - 4096


def test_truncate_text_cuts_after_a_sentence() -> None:
    text = "Первое предложение. Второе предложение подлиннее! Третье? Четвёртое."
    cut = truncate_text(text, 17, COUNTER)
    assert cut == "Первое предложение. Второе предложение подлиннее!"
    assert COUNTER.count(cut) <= 17
    assert truncate_text(text, 16, COUNTER) == "Первое предложение."
    assert truncate_text(text, 1000, COUNTER) == text
    assert truncate_text(text, 0, COUNTER) == ""


def test_truncate_text_keeps_whole_lines_of_keyvalue_summaries() -> None:
    text = "decision:db: PostgreSQL\nconstraint:budget: 100$\naction:deploy: done\nopen: tests"
    cut = truncate_text(text, 17, COUNTER)
    assert cut == "decision:db: PostgreSQL\nconstraint:budget: 100$"


def test_truncate_text_cuts_one_long_sentence_between_words() -> None:
    text = "слово " * 200
    cut = truncate_text(text, 20, COUNTER)
    assert cut.endswith(" …") and COUNTER.count(cut) <= 20 and "слово слово" in cut


# --- facts ----------------------------------------------------------------------------


def test_facts_ordered_by_importance_soft_ones_apart_and_labelled() -> None:
    facts = [
        fact("tea", "любит зелёный чай", "preference", 4),
        fact("name", "Алексей", "fact", 9),
        fact("budget", "не больше 300 тысяч", "constraint", 8),
        fact("db", "возможно, тормозит база", "hypothesis", 6),
    ]
    stable, soft = facts_sections(facts, 500, COUNTER, objective=False, limit=30)
    assert stable.splitlines() == [
        prompts.FACTS_HEADER,
        "- name: Алексей",
        "- [constraint] budget: не больше 300 тысяч",
    ]
    assert soft.splitlines() == [
        prompts.SOFT_FACTS_HEADER,
        prompts.FACTS_SOFT_NOTE,
        "- [hypothesis] db: возможно, тормозит база",
        "- [preference] tea: любит зелёный чай",
    ]


def test_objective_facts_leave_preferences_and_hypotheses_out() -> None:
    facts = [fact("tea", "чай", "preference", 10), fact("name", "Алексей", "fact", 1)]
    stable, soft = facts_sections(facts, 500, COUNTER, objective=True, limit=30)
    assert stable == prompts.FACTS_HEADER + "\n- name: Алексей"
    assert soft == prompts.FACTS_OBJECTIVE_NOTE
    # The same stable part either way: the system prompt does not change with the request.
    assert facts_sections(facts, 500, COUNTER, objective=False, limit=30)[0] == stable
    assert facts_sections(facts[1:], 500, COUNTER, objective=True, limit=30) == (stable, "")


def test_facts_within_budget_and_limit() -> None:
    facts = [fact(f"k{i}", "значение " * 5, importance=10 - i % 10) for i in range(100)]
    stable, _ = facts_sections(facts, 120, COUNTER, objective=False, limit=30)
    assert COUNTER.count(stable) <= 120
    assert "- k0:" in stable  # the most important first
    three, _ = facts_sections(facts, 1000, COUNTER, objective=False, limit=3)
    assert three.count("\n- ") == 3
    assert facts_sections(facts, 5, COUNTER, objective=False, limit=30) == ("", "")
    mixed = [fact(f"p{i}", "значение " * 5, "preference", 9) for i in range(20)] + facts
    stable, soft = facts_sections(mixed, 300, COUNTER, objective=False, limit=30)
    assert COUNTER.count(stable) + COUNTER.count(soft) <= 300


@pytest.mark.parametrize(
    "text",
    [
        "Проанализируй, почему упал сервис ночью",
        "Сравни PostgreSQL и MySQL для нашего проекта",
        "Оцени объективно мой бизнес-план",
        "What's the root cause of this incident?",
        "Please analyze the logs and verify the evidence",
        "Найди первопричину ошибки",
    ],
)
def test_auto_detects_requests_that_need_objectivity(text: str) -> None:
    assert needs_objectivity(text, "auto")


@pytest.mark.parametrize(
    "text",
    [
        "Посоветуй, что приготовить на ужин",
        "Привет! Как дела?",
        "Recommend me a book for the weekend",
        "Напомни, о чём мы говорили вчера",
    ],
)
def test_auto_keeps_personalization_for_other_requests(text: str) -> None:
    assert not needs_objectivity(text, "auto")


def test_objective_mode_always_and_never() -> None:
    assert needs_objectivity("Привет", "always")
    assert not needs_objectivity("Проанализируй инцидент", "never")


def test_the_time_stamp_is_not_the_request() -> None:
    assert not needs_objectivity("[Проверено: 2025-01-01 10:00] Привет", "auto")
    assert needs_objectivity("[Текущее время: 2025-01-01 10:00] Сравни два варианта", "auto")


@pytest.mark.parametrize(
    ("mode", "text", "soft_shown"),
    [
        ("auto", "Посоветуй чай к ужину", True),
        ("auto", "Проанализируй, почему тормозит сервис", False),
        ("always", "Посоветуй чай к ужину", False),
        ("never", "Проанализируй, почему тормозит сервис", True),
    ],
)
def test_objectivity_switch_after_the_current_message(
    mode: str, text: str, soft_shown: bool
) -> None:
    facts = [
        fact("tea", "любит улун", "preference", 7),
        fact("slow_db", "считает, что виновата база", "hypothesis", 7),
        fact("name", "Алексей", "fact", 9),
    ]
    messages, _, _ = build_context(
        state(facts=facts, input_text=text), settings(facts_objective_mode=mode), COUNTER
    )
    system, current = messages[0].text, messages[-1].text
    assert "- name: Алексей" in system and "[preference]" not in system
    # The system prompt is the same whatever the request: a cache reuses it.
    other, _, _ = build_context(state(facts=facts), settings(), COUNTER)
    assert other[0].text == system
    assert current.startswith("[1] User: " + text)
    assert ("[preference] tea: любит улун" in current) is soft_shown
    assert ("[hypothesis] slow_db" in current) is soft_shown
    assert (prompts.FACTS_OBJECTIVE_NOTE in current) is not soft_shown
    assert current.count(prompts.MEMORY_OPEN) == 1 and current.endswith(prompts.MEMORY_CLOSE)


# --- previous conversations and summary -----------------------------------------------


def compact(i: int, conversation_id: str | None = None) -> dict[str, Any]:
    return {
        "conversation_id": conversation_id or f"00000000-0000-0000-0000-00000000000{i}",
        "created_at": f"2024-12-2{i}T12:30:00+00:00",
        "summary": f"Разговор номер {i} про переезд.",
        "topics": ["переезд", f"тема{i}"],
        "last_action": f"действие {i}",
    }


def test_memory_is_one_delimited_data_section_after_the_base_prompt() -> None:
    facts = [{"key": "name", "value": "Анна", "type": "fact", "importance": 9}]
    s = settings()
    system = build_context(
        state(facts=facts, compacts=[compact(1)], summary="Обсуждали переезд."), s, COUNTER
    )[0][0].text
    base, _, memory = system.partition("\n\n" + prompts.MEMORY_OPEN + "\n")
    assert base == prompts.SYSTEM_PROMPT  # the instructions are ours alone
    assert memory.endswith("\n" + prompts.MEMORY_CLOSE)
    for part in ("name: Анна", "номер 1", "Обсуждали переезд."):
        assert part in memory
    assert "never as instructions" in prompts.SYSTEM_PROMPT


def test_plain_replies_ask_the_model_for_plain_text() -> None:
    plain = build_context(state(), settings(telegram_reply_format="plain"), COUNTER)[0][0]
    assert plain.text == f"{prompts.SYSTEM_PROMPT}\n{prompts.PLAIN_TEXT_NOTE}"
    rendered = build_context(state(), settings(), COUNTER)[0][0]  # Markdown, the default
    assert rendered.text == prompts.SYSTEM_PROMPT


def test_previous_conversations_in_the_system_prompt_oldest_first() -> None:
    compacts = [compact(3), compact(2), compact(1)]  # newest first, as loaded
    sections = system_sections(
        state(compacts=compacts), Layers.for_model(settings(), "x"), COUNTER, settings()
    )
    text = sections["previous"]
    assert text.startswith(prompts.PREVIOUS_CONVERSATIONS_HEADER)
    assert text.index("номер 1") < text.index("номер 2") < text.index("номер 3")
    assert "2024-12-21 15:30" in text  # shown in TIMEZONE (Moscow)
    assert "Topics: переезд, тема1." in text and "Last action: действие 1." in text


def test_compacts_in_prompt_limit_own_conversation_sessions_included() -> None:
    # Compact 4 is of an earlier session of the conversation in progress (it ended by
    # silence): it belongs under "Previous conversations" like any other (issue 12).
    compacts = [compact(4, CONV), compact(3), compact(2), compact(1)]
    s = settings(compacts_in_prompt=2)
    system = build_context(state(compacts=compacts), s, COUNTER)[0][0].text
    assert "номер 4" in system and "номер 3" in system
    assert "номер 2" not in system and "номер 1" not in system
    s0 = settings(compacts_in_prompt=0)
    assert (
        prompts.PREVIOUS_CONVERSATIONS_HEADER
        not in build_context(state(compacts=compacts), s0, COUNTER)[0][0].text
    )


def test_summary_cut_to_its_layer_on_a_sentence() -> None:
    summary = " ".join(f"Пункт {i}: пользователь решил задачу {i}." for i in range(2000))
    s = settings(default_context_limit=4000, llm_max_output_tokens=1000)
    layers = Layers.for_model(s, s.llm_model)
    text = system_sections(state(summary=summary), layers, COUNTER, s)["summary"]
    assert text.startswith(f"{prompts.SUMMARY_HEADER}\n{prompts.SUMMARY_CUT_LINE}\nПункт ")
    assert COUNTER.count(text) <= layers.summary
    assert text.endswith("задачу 1999.")  # its newest part


class CountingCounter(ApproxCounter):
    """The approximate counter, counting how often it is asked."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return super().count(text)


def test_cutting_a_long_summary_counts_a_few_candidates_not_every_sentence() -> None:
    # Each turn cuts the running summary to its layer: counting every suffix in turn
    # cost seconds of CPU for a summary of 2,000 sentences.
    summary = " ".join(f"Пункт {i}: пользователь решил задачу {i}." for i in range(2000))
    counter = CountingCounter()
    text = truncate_start(summary, 500, counter)
    assert counter.calls <= 2 + 12  # the whole text, then a binary search of 2,000 starts
    assert COUNTER.count(text) <= 500 and text.endswith("задачу 1999.")
    assert text.startswith("Пункт ")
    previous = summary.rindex("Пункт", 0, summary.index(text))
    assert COUNTER.count(summary[previous:]) > 500  # one sentence more would not fit
    word = truncate_start("слово " * 3000, 40, CountingCounter())
    assert word.startswith("… ") and COUNTER.count(word) <= 40


def test_after_forget_only_the_system_prompt_and_the_message() -> None:
    # /forget: seed 000's window is empty and the summary was reset.
    messages, snapshot, tokens = build_context(state(), settings(), COUNTER)
    assert [type(m) for m in messages] == [SystemMessage, HumanMessage]
    assert messages[0].text == prompts.SYSTEM_PROMPT
    assert messages[1].text == "[1] User: [Текущее время: 2025-01-01 10:00] что дальше?"
    assert snapshot == [{"id": 1000, "number": 1000, "role": "user"}]
    assert tokens == count_messages(messages, COUNTER)


# --- working memory -------------------------------------------------------------------


def long_history(n: int, size: int = 40) -> list[dict[str, Any]]:
    return [
        row(i, "user" if i % 2 else "assistant", f"сообщение {i} " + "текст " * size)
        for i in range(1, n + 1)
    ]


def test_recent_keeps_the_newest_that_fit_in_order() -> None:
    s = settings(default_context_limit=1500, llm_max_output_tokens=200)
    messages, snapshot, tokens = build_context(state(history=long_history(30)), s, COUNTER)
    ids = [r["id"] for r in snapshot[:-1]]
    assert ids == list(range(ids[0], 31)) and ids[0] > 1
    layers = Layers.for_model(s, s.llm_model)
    assert count_messages(messages[1:-1], COUNTER) <= layers.working
    assert tokens <= layers.total


def test_scored_keeps_errors_and_decisions_over_plain_chatter() -> None:
    history = long_history(30, size=20)
    history[4]["content"] = "Ошибка: сервис упал с exception " + "текст " * 20
    history[8]["content"] = "Итак, решили: выбрали PostgreSQL " + "текст " * 20
    s = settings(default_context_limit=1400, llm_max_output_tokens=200)
    recent = build_context(state(history=history), s, COUNTER)[1]
    scored_settings = settings(
        default_context_limit=1400, llm_max_output_tokens=200, context_selection="scored"
    )
    scored = build_context(state(history=history), scored_settings, COUNTER)[1]
    recent_ids = [r["id"] for r in recent[:-1]]
    scored_ids = [r["id"] for r in scored[:-1]]
    assert 5 not in recent_ids and 9 not in recent_ids
    assert 5 in scored_ids and 9 in scored_ids
    assert scored_ids == sorted(scored_ids) and scored_ids[-2:] == [29, 30]


def test_tool_call_and_results_stay_together() -> None:
    calls = [{"id": "c1", "name": "search_history", "args": {"query": "x"}}]
    history = [
        *long_history(6),
        row(7, "assistant", "", tool_calls=calls),
        row(8, "tool", "found: " + "много текста " * 30, tool_call_id="c1", name="search_history"),
        row(9, "system", "Tools used: search_history"),
        row(10, "assistant", "Нашёл."),
    ]
    for limit in range(512, 1600, 25):
        s = settings(default_context_limit=limit, llm_max_output_tokens=16)
        messages = build_context(state(history=history), s, COUNTER)[0]
        kinds = [type(m) for m in messages]
        if ToolMessage in kinds:
            i = kinds.index(ToolMessage)
            assert isinstance(messages[i - 1], AIMessage) and messages[i - 1].tool_calls
        assert not any(isinstance(m, AIMessage) and m.tool_calls for m in messages[-3:-2])


def test_orphan_tool_result_becomes_a_note() -> None:
    history = [row(1, "tool", "result without its call", tool_call_id="gone")]
    messages = build_context(state(history=history), settings(), COUNTER)[0]
    assert not any(isinstance(m, ToolMessage) for m in messages)
    assert "result without its call" in messages[1].text


def test_tiny_budget_keeps_system_prompt_and_message() -> None:
    s = settings(default_context_limit=512, llm_max_output_tokens=500)
    big = state(
        history=long_history(30),
        summary="Длинное саммари. " * 500,
        facts=[fact("name", "Алексей " * 50)],
        input_text="вопрос " * 400,
    )
    messages, snapshot, _ = build_context(big, s, COUNTER)
    assert messages[0].text == prompts.SYSTEM_PROMPT
    assert len(messages) == 2 and messages[1].text.rstrip().endswith("вопрос")
    assert len(snapshot) == 1


def test_a_rows_cost_is_that_of_the_message_the_model_reads() -> None:
    """row_tokens counts most rows without rendering them: the same count either way."""
    counter = ApproxCounter()
    rows: list[dict[str, Any]] = [
        {"role": "user", "content": "[Текущее время: 2026-11-24 10:00] Привет, как дела?"},
        {"role": "assistant", "content": "Хорошо! A quick answer, 42 words.", "meta": None},
        {"role": "assistant", "content": "", "meta": {}},
        {"role": "tool", "content": "found 3", "meta": {"tool_call_id": "c1", "name": "x"}},
        {"role": "system", "content": "Tools used: search_history", "meta": None},
        {"role": "assistant", "content": "squashed", "meta": {"frs_summary": True}},
        {"role": "assistant", "content": "half", "meta": {"interrupted": True}},
        {"role": "assistant", "content": None, "meta": {"interrupted": True}},
        {
            "role": "assistant",
            "content": "looking",
            "meta": {"tool_calls": [{"id": "c1", "name": "search_history", "args": {"q": "x"}}]},
        },
    ]
    for row in rows:
        for prefix in (WIDEST_LABEL, "[7] User: ", ""):
            rendered = message_text(render_row(row, prefix))
            assert (
                row_tokens(row, counter, prefix) == counter.count(rendered) + PER_MESSAGE_OVERHEAD
            )


def test_scored_selection_keeps_what_the_summary_does_not_hold() -> None:
    """Issue 30: the score chooses only among messages the summary holds already; a
    message it has not folded is never left out for a better-scored one."""
    from src.graph.context.working import select_scored

    def row(i: int, text: str, summarized: bool) -> dict[str, Any]:
        return {"id": i, "role": "user", "content": text, "summarized": summarized, "meta": {}}

    units = [
        [row(1, "error: the decision we agreed", True)],  # scores high, folded already
        [row(2, "plain words", False)],
        [row(3, "more plain words", False)],
        [row(4, "latest", False)],
    ]
    kept = select_scored(units, budget=3, cost=lambda r: 1, pinned=1)
    assert [u[0]["id"] for u in kept] == [2, 3, 4]


def test_a_long_message_beside_a_small_model_keeps_the_newest_summary_and_says_so() -> None:
    """Before: when the layers did not all fit beside the current message, the running
    summary went with the facts, silently: what it held was in neither the prompt nor
    anything the model was told."""
    s = settings(default_context_limit=2000, llm_max_output_tokens=300)
    summary = " ".join(f"The user said thing number {i}." for i in range(1, 60))
    big = state(
        history=long_history(10),
        summary=summary,
        facts=[fact("name", "Алексей " * 50)],
        input_text="вопрос " * 500,
    )
    messages, snapshot, tokens = build_context(big, s, COUNTER)
    system = messages[0].text
    assert system.startswith(prompts.SYSTEM_PROMPT) and prompts.SUMMARY_HEADER in system
    assert "thing number 59." in system and "thing number 1." not in system  # newest kept
    assert "Алексей" not in system
    assert messages[-1].text.endswith(prompts.SUMMARY_CUT_NOTE)
    assert len(snapshot) == 1
    assert tokens <= Layers.for_model(s, s.llm_model).total


def test_a_summary_that_fits_whole_beside_a_long_message_needs_no_note() -> None:
    s = settings(default_context_limit=2000, llm_max_output_tokens=300)
    big = state(
        summary="The user is Alexei.", facts=[fact("n", "x " * 400)], input_text="вопрос " * 600
    )
    messages = build_context(big, s, COUNTER)[0]
    assert "The user is Alexei." in messages[0].text
    assert prompts.SUMMARY_CUT_NOTE not in messages[-1].text
