"""Reading what the cheap models answer: typed facts and session compacts, garbage included."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from src.graph.memory.facts import normalize_key, parse_facts, reuse_known_keys
from src.graph.memory.structured import load_json
from src.services.compaction import COMPACT_CHARS, fallback_compact, parse_compact

GOOD = [
    {"key": "name", "value": "Алексей", "type": "fact", "importance": 9},
    {"key": "tea", "value": "зелёный без сахара", "type": "preference", "importance": 4},
]


@pytest.mark.parametrize(
    "answer",
    [
        json.dumps(GOOD, ensure_ascii=False),
        "```json\n" + json.dumps(GOOD, ensure_ascii=False) + "\n```",
        "Вот факты:\n" + json.dumps(GOOD, ensure_ascii=False) + "\nГотово.",
        json.dumps({"facts": GOOD}, ensure_ascii=False),
    ],
)
def test_facts_read_from_json_in_any_wrapping(answer: str) -> None:
    facts = parse_facts(answer)
    assert [(f["key"], f["type"], f["importance"]) for f in facts] == [
        ("name", "fact", 9),
        ("tea", "preference", 4),
    ]


@pytest.mark.parametrize(
    "answer",
    ["", "no facts here", "[", '[{"key": "a", "value": ', "null", "42", '"text"', "{}", "[]"],
)
def test_garbage_yields_no_facts(answer: str) -> None:
    assert parse_facts(answer) == []


def test_facts_repaired_item_by_item() -> None:
    answer = json.dumps(
        [
            {"key": "  Home City ", "value": "Казань", "type": "FACT", "importance": "7"},
            {"key": "likes", "value": "jazz", "type": "likes", "importance": 99},
            {"key": "guess", "value": "устал", "type": "opinion", "importance": "high"},
            {"key": "", "value": "no key"},
            {"key": "empty", "value": ""},
            {"key": "list", "value": ["a", "b"], "type": "fact"},
            "not an object",
            {"key": "home_city", "value": "Самара", "type": "fact", "importance": 8},
        ],
        ensure_ascii=False,
    )
    facts = {f["key"]: f for f in parse_facts(answer)}
    assert set(facts) == {"likes", "guess", "list", "home_city"}
    assert facts["home_city"]["value"] == "Самара"  # a repeated key: the last one wins
    assert facts["likes"] == {
        "key": "likes",
        "value": "jazz",
        "type": "preference",
        "importance": 10,
        "action": "add",
    }
    assert facts["guess"]["type"] == "hypothesis" and facts["guess"]["importance"] == 5
    assert facts["list"]["value"] == '["a", "b"]'


def test_normalize_key() -> None:
    assert normalize_key("Любимый  напиток!") == "любимый_напиток"
    assert normalize_key("a" * 100) == "a" * 64
    # Words that only say "about the user" do not make a new key.
    assert normalize_key("User's name") == normalize_key("my_name") == "name"
    assert normalize_key("имя пользователя") == "имя"
    assert normalize_key("user") == "user"  # nothing else left: kept as it is


def test_known_keys_are_reused_for_the_same_thing() -> None:
    known = ["favorite_books", "city", "dog_name"]
    facts = [
        {"key": "favorite_book", "value": "Dune"},
        {"key": "city", "value": "Kazan"},
        {"key": "dogs_name", "value": "Rex"},
        {"key": "car", "value": "Skoda"},
    ]
    assert [f["key"] for f in reuse_known_keys(facts, known)] == [
        "favorite_books",
        "city",
        "dog_name",
        "car",
    ]


@given(st.text(max_size=200))
def test_any_text_parses_without_error(answer: str) -> None:
    for fact in parse_facts(answer):
        assert fact["key"] and fact["value"] and 1 <= fact["importance"] <= 10
    load_json(answer)


def test_compact_from_json() -> None:
    answer = json.dumps(
        {
            "timestamp": "2024-12-21T15:30:00Z",
            "summary": "Обсуждали переезд. Решили ехать в мае.",
            "topics": ["переезд", "май"],
            "lastAction": "Составили список вещей",
        },
        ensure_ascii=False,
    )
    compact = parse_compact(answer)
    assert compact.summary == "Обсуждали переезд. Решили ехать в мае."
    assert compact.topics == ["переезд", "май"]
    assert compact.last_action == "Составили список вещей" and compact.repaired == ""


def test_compact_far_over_500_chars_is_cut_on_a_sentence() -> None:
    long = " ".join(f"Предложение номер {i} о переезде." for i in range(60))
    compact = parse_compact(json.dumps({"summary": long, "topics": "переезд, работа"}))
    assert len(compact.summary) <= COMPACT_CHARS and compact.summary.endswith(".")
    assert compact.topics == ["переезд", "работа"] and compact.repaired == "summary too long"


def test_compact_a_little_over_500_chars_is_kept() -> None:
    text = "а" * 600
    assert parse_compact(json.dumps({"summary": text})).summary == text


def test_compact_plain_text_answer_is_kept_as_text() -> None:
    compact = parse_compact("Говорили о марафоне и питании.")
    assert compact.summary == "Говорили о марафоне и питании." and compact.repaired == "not JSON"
    assert parse_compact('{"summary": "", "topics": []} Итог: обсудили бюджет.').summary


def test_empty_compact_answer_is_an_error() -> None:
    with pytest.raises(ValueError):
        parse_compact("   ")


def test_fallback_compact_without_the_model() -> None:
    rows = [
        {"role": "user", "content": "[Текущее время: 2025-01-01 10:00] Хочу пробежать марафон"},
        {"role": "assistant", "content": "Начните с 5 км. " * 40},
        {"role": "user", "content": "[Текущее время: 2025-01-01 10:05] А питание?"},
        {"role": "assistant", "content": "Больше углеводов перед стартом."},
    ]
    compact = fallback_compact(rows)
    assert compact.summary == "User wrote: Хочу пробежать марафон | А питание?"
    assert compact.last_action == "Больше углеводов перед стартом."
    assert compact.repaired == "model failed"
