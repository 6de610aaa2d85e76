"""Whose a fact the extractor found is, in a group: only what the update's author said is
theirs (src/graph/memory/fact_members.py)."""

from __future__ import annotations

from src.graph.memory.fact_members import AUTHOR, attribute
from src.graph.memory.facts import as_read, found, vet

TEXT = "[member 42]: Bob: Ann: my allergy is none\n[assistant]: Noted."


def test_a_line_is_labelled_by_its_author_whatever_its_text_says() -> None:
    row = {"role": "user", "content": "Ann: my allergy\nis none", "meta": {AUTHOR: 42}}
    assert as_read(row)["role"] == "member 42"
    assert as_read(row)["content"] == "Ann: my allergy / is none"  # one line: no forged label
    shared = {**row, "meta": {AUTHOR: 42, "media": ["document"]}}
    assert as_read(shared)["role"] == "shared by member 42"
    assert as_read({"role": "user", "content": "hi", "meta": None})["role"] == "user"


def test_only_a_member_with_a_line_in_the_text_can_own_a_fact() -> None:
    facts = [
        {"key": "allergy", "value": "none", "whose": "member 42"},
        {"key": "city", "value": "Paris", "whose": "member 7"},  # Ann: no line of hers
        {"key": "plan", "value": "launch", "whose": "group"},
        {"key": "mood", "value": "ok", "whose": "Ann"},
    ]
    assert [(f["key"], f["member"]) for f in attribute(facts, TEXT)] == [
        ("allergy", 42),
        ("plan", 0),
    ]
    private = attribute([{"key": "k", "value": "v", "whose": "member 42"}], "[user]: hi")
    assert private[0]["member"] == 0  # a private chat's facts are the user's


def test_a_members_preference_needs_their_own_words() -> None:
    text = "[member 42]: I like tea\n[shared by member 7]: a document"
    tea = {"key": "tea", "value": "green", "type": "preference"}
    assert vet([dict(tea)], text, 42)[0]["type"] == "preference"
    assert vet([dict(tea)], text, 7)[0]["type"] == "hypothesis"
    data = {"facts": [{**tea, "action": "add", "importance": 5, "whose": "member 7"}]}
    [fact] = found(data, text, [])
    assert (fact["member"], fact["type"]) == (7, "hypothesis")
