"""The recall bench's set of chats between two friends keeps its promises."""

from __future__ import annotations

import json
from datetime import timedelta

from bench import dialogues, recall
from bench.recall_data import content_words
from src.graph.timestamps import STAMP, strip_stamp
from src.storage.search_dates import date_range


def test_the_stored_set_is_what_the_generator_makes() -> None:
    stored = json.loads(dialogues.PATH.read_text(encoding="utf-8"))
    assert stored == json.loads(json.dumps(dialogues.generate(), ensure_ascii=False))
    assert dialogues.PATH.stat().st_size < 3_000_000


def test_long_chats_with_questions_in_other_words_and_the_users_own() -> None:
    data = dialogues.load()
    assert {q.kind for q in data.questions} == set(dialogues.KINDS)
    assert len(data.questions) >= 250
    for conv in data.conversations:
        users = [m for m in conv.messages if m.role == "user"]
        assert len(users) >= 300 and all(STAMP.match(m.content) for m in users)
        times = [m.created_at for m in conv.messages]
        assert times == sorted(times) and times[-1] - times[0] > timedelta(days=120)
    overlap = []
    for q in data.questions:
        conv = data.conversation(q.conversation)
        by_number = {m.number: m for m in conv.messages}
        asked = by_number[q.number]
        # Each question is stored where the user asked it, and is one of their own.
        assert q.number in conv.echoes and strip_stamp(asked.content) == q.text
        assert q.asked == asked.created_at
        answers = [by_number[n] for n in q.answers]
        assert all(a.role == "user" and a.created_at < q.asked for a in answers)
        if q.kind == "multi-hop":
            assert len(answers) == 2
        if q.kind == "temporal":
            # The relative date names the answer's day, read as the product reads it.
            named = date_range(q.text, q.asked)
            assert named is not None, q.text
            assert named.since <= answers[0].created_at < named.until, q.text
        words = content_words(q.text, "en")
        shared = words & set().union(*(content_words(a.content, "en") for a in answers))
        overlap.append(len(shared) / max(1, len(words)))
    # Questions use other words than the answers' mostly (a name, a topic word: 40%).
    assert sum(overlap) / len(overlap) < 0.5
    # The user asked some of them twice, in other words, before.
    assert sum(len(c.echoes) for c in data.conversations) > len(data.questions)


def test_the_dialogues_set_is_the_default() -> None:
    assert recall.config_from(recall.parse([]))["set"] == "dialogues"
    assert recall.config_from(recall.parse(["--quick"]))["set"] == "synthetic"
    assert recall.config_from(recall.parse(["--quick", "--set", "dialogues"]))["set"] == "dialogues"
