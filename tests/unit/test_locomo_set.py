"""bench recall's locomo-dev set: LoCoMo's format read from outside the repository."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import locomo, recall
from src.graph.timestamps import strip_stamp

SAMPLE = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "Did you get to the pottery class?"},
            {
                "speaker": "Ben",
                "dia_id": "D1:2",
                "text": "Yes! Look at my bowl.",
                "blip_caption": "a photo of a blue bowl",
            },
        ],
        "session_2_date_time": "10:04 am on 2 June, 2023",
        "session_2": [{"speaker": "Ana", "dia_id": "D2:1", "text": "I adopted a greyhound."}],
    },
    "qa": [
        {"question": "What did Ben make?", "answer": "a bowl", "evidence": ["D1:2"], "category": 4},
        {"question": "When?", "answer": "May", "evidence": ["D1:1; D2:1"], "category": 2},
        {"question": "Not said", "adversarial_answer": "x", "evidence": ["D1:1"], "category": 5},
        {"question": "Broken", "answer": "?", "evidence": ["D"], "category": 1},
    ],
}


def test_turns_become_stamped_user_messages_and_questions_know_their_turns(
    tmp_path: Path,
) -> None:
    (tmp_path / locomo.FILE).write_text(json.dumps([SAMPLE]), encoding="utf-8")
    data = locomo.load(tmp_path)
    (conv,) = data.conversations
    roles = [m.role for m in conv.messages]
    assert roles == ["user", "assistant"] * 3
    texts = [strip_stamp(m.content) for m in conv.messages if m.role == "user"]
    assert texts == [
        "Ana: Did you get to the pottery class?",
        "Ben: Yes! Look at my bowl. [image: a photo of a blue bowl]",
        "Ana: I adopted a greyhound.",
    ]
    assert conv.messages[0].content.startswith("[Current time: 2023-05-08 13:56]")
    assert conv.messages[4].content.startswith("[Current time: 2023-06-02 10:04]")
    # Adversarial questions (no answer) and those whose evidence names no turn are left out.
    assert [(q.kind, q.answers) for q in data.questions] == [
        ("single-hop", (3,)),
        ("temporal", (1, 5)),
    ]
    assert all(
        q.asked is not None and q.asked > conv.messages[-1].created_at for q in data.questions
    )


def test_without_the_data_the_bench_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(locomo.ENV, str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit, match="nowhere"):
        locomo.load()
    args = recall.parse(["--set", "locomo-dev", "--locomo-dir", str(tmp_path)])
    cfg = recall.config_from(args)
    assert cfg["set"] == "locomo-dev" and cfg["locomo_dir"] == str(tmp_path)
    with pytest.raises(SystemExit, match=str(tmp_path)):
        recall.load_set(cfg)
