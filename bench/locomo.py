"""LoCoMo's development half as the recall bench's set (`bench recall --set locomo-dev`).

Real long conversations between two people (LoCoMo: Maharana et al., ACL 2024), read from
outside the repository (it is third-party research data, never copied here): the
directory named by --locomo-dir, else LOCOMO_DEV_DIR, else `../shared/data/locomo-dev`
beside the checkout. Every turn is one user message to the bot, `Speaker: text` (with
`[image: caption]` when the turn shares a photo), stamped with its session's date as the
product stamps it, followed by the bot's short reply; the questions (categories 1-4:
multi-hop, temporal, open-domain, single-hop; 5, adversarial, has no answer and is left
out) are asked a day after the last session, as the model asks them, and a question is
answered when one of its evidence turns is found.
"""

from __future__ import annotations

import json
import os
import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.dialogue_words import ACKS
from bench.recall_data import Conversation, Dataset, Message, Question
from src.graph.timestamps import stamp

ENV = "LOCOMO_DEV_DIR"
DEFAULT_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo-dev"
FILE = "locomo-dev.json"
KINDS = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
OWNER_BASE = 7_400_000
SEED = 20261128
_TURN_ID = re.compile(r"D\d+:\d+")
_SETTINGS = type("S", (), {"zone": UTC, "time_label": "Current time"})()


class MissingData(SystemExit):
    """The set's file is not where the bench looked."""


def locate(directory: Path | None = None) -> Path:
    """Return the set's file: in `directory`, else $LOCOMO_DEV_DIR, else the default."""
    if directory is None:
        directory = Path(os.environ[ENV]) if os.environ.get(ENV) else DEFAULT_DIR
    path = directory / FILE
    if not path.is_file():
        raise MissingData(
            f"locomo-dev: no {FILE} in {directory} (looked at {path.resolve()}); "
            f"give its directory with --locomo-dir or {ENV}"
        )
    return path


def _when(text: str) -> datetime:
    """Parse a session's time, "1:56 pm on 8 May, 2023"."""
    return datetime.strptime(" ".join(text.split()), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def _turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [image: {turn['blip_caption']}]"
    return text


def _sample(
    raw: dict[str, Any], index: int, rng: random.Random
) -> tuple[Conversation, list[Question]]:
    conv = raw["conversation"]
    name = raw.get("sample_id", f"conv-{index}")
    sessions = sorted(
        (int(k.split("_")[1]), k) for k in conv if re.fullmatch(r"session_\d+", k) and conv[k]
    )
    messages: list[Message] = []
    numbers: dict[str, int] = {}
    last = datetime.min.replace(tzinfo=UTC)
    for _n, key in sessions:
        at = max(_when(conv[f"{key}_date_time"]), last + timedelta(minutes=1))
        for turn in conv[key]:
            number = len(messages) + 1
            numbers[turn["dia_id"]] = number
            messages.append(Message(number, "user", stamp(_turn_text(turn), at, _SETTINGS), at))
            reply = at + timedelta(seconds=4)
            messages.append(Message(number + 1, "assistant", rng.choice(ACKS), reply))
            last = at
            at += timedelta(minutes=1)
    asked = (last + timedelta(days=1)).replace(hour=12, minute=0)
    questions = []
    for n, qa in enumerate(raw["qa"]):
        kind = KINDS.get(int(qa.get("category", 5)))
        if kind is None:
            continue
        evidence = [e for item in qa.get("evidence", []) for e in _TURN_ID.findall(str(item))]
        answers = tuple(sorted({numbers[e] for e in evidence if e in numbers}))
        if not answers:
            continue
        questions.append(
            Question(
                f"{name}-{n:03d}",
                name,
                "en",
                kind,
                str(qa["question"]),
                answers,
                str(qa["answer"]),
                asked=asked,
            )
        )
    return Conversation(name, "en", OWNER_BASE + index, tuple(messages)), questions


def load(directory: Path | None = None) -> Dataset:
    """Return LoCoMo's development half as the recall bench's conversations and questions."""
    raw = json.loads(locate(directory).read_text(encoding="utf-8"))
    rng = random.Random(SEED)
    convs = []
    questions: list[Question] = []
    for index, sample in enumerate(raw):
        conv, asked = _sample(sample, index, rng)
        convs.append(conv)
        questions += asked
    return Dataset(tuple(convs), tuple(questions), SEED)
