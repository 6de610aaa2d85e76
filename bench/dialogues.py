"""Long chats between two friends, sent to the bot turn by turn, and the questions a user
asks about them later: the recall bench's set that looks like real use.

Each conversation is months of sessions between two friends (small talk mostly); every
friend's turn is one user message to the bot (`Name: text`, stamped as the product
stamps it) followed by the bot's short reply, as when a chat is forwarded to the bot.
Events (a new pet, a trip, a job, ...) are told in one turn or across two turns around
the other friend's question. The user then asks the bot about them, in other words
than the friends used, at a known time, and those questions stay in the history (with
some asked twice, reworded), as a user's own questions do. Question kinds:

- single-hop: one turn answers, asked in other words ("Which city did Tom travel to?"
  for "Just got back from Lisbon!");
- multi-hop: the answer spans two turns of the teller (either found counts);
- temporal: names the day relatively to when it is asked ("last Tuesday", "two weeks
  ago", "in March", "yesterday");
- open-domain: follows from the turn without naming what it says ("Does Tom have any
  animals at home?").

Deterministic (seeded). `python -m bench.dialogues` writes bench/data/dialogues.json,
which `bench recall --set dialogues` reads.
"""

from __future__ import annotations

import json
import random
import sys
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from bench.dialogue_words import (
    ACKS,
    ANSWER_REPLIES,
    EVENTS,
    MONTHS,
    NUMBERS,
    RE_ASK,
    SMALL_TALK,
    WEEKDAYS,
)
from bench.recall_data import Conversation, Dataset, Message, Question
from src.graph.timestamps import stamp

SEED = 20261127
ZONE = ZoneInfo("Europe/Moscow")
PATH = Path(__file__).resolve().parent / "data" / "dialogues.json"
KINDS = ("single-hop", "multi-hop", "temporal", "open-domain")
PAIRS = (
    ("Maya", "Tom"),
    ("Lena", "Omar"),
    ("Kate", "Raj"),
    ("Sofia", "Dan"),
    ("Alice", "Ben"),
    ("Nina", "Leo"),
)
SESSIONS = 32
OWNER_BASE = 7_300_000
START = date(2026, 1, 5)
TIME_LABEL = "Текущее время"
_SETTINGS = type("S", (), {"zone": ZONE, "time_label": TIME_LABEL})()


def relative(rng: random.Random, day: date) -> tuple[str, date]:
    """Return a relative date that names `day` and the day it is said on."""
    choices: list[tuple[str, int]] = [("yesterday", 1)]
    for gap in (2, 3, 4, 5, 6):
        choices.append((f"last {WEEKDAYS[day.weekday()]}", gap))
    for n in (2, 3, 4, 5):
        choices.append((f"{NUMBERS[n]} days ago", n))
    choices += [("a week ago", 7), ("two weeks ago", 14), ("three weeks ago", 21)]
    if day.weekday() >= 5:
        choices.append(("last weekend", 7 - day.weekday() + rng.randint(0, 4)))
    phrase, gap = rng.choice(choices)
    if rng.random() < 0.2:
        # A month named outright, asked months later.
        return f"in {MONTHS[day.month - 1]}", day + timedelta(days=rng.randint(40, 90))
    if phrase.startswith("last ") and phrase != "last weekend":
        phrase = rng.choice((phrase, "on " + phrase[5:], f"this past {phrase[5:]}"))
    return phrase, day + timedelta(days=gap)


def _at(rng: random.Random, day: date, low: int = 8, high: int = 22) -> datetime:
    return datetime(day.year, day.month, day.day, rng.randint(low, high), rng.randint(0, 59))


def _conversation(rng: random.Random, index: int) -> dict[str, Any]:
    """Return one conversation's timeline and questions (before numbering)."""
    a, b = PAIRS[index]
    days = []
    day = START + timedelta(days=rng.randint(0, 6))
    for _ in range(SESSIONS):
        days.append(day)
        day += timedelta(days=rng.randint(2, 7))
    sessions: list[list[tuple[str, str, str]]] = []
    for _ in days:
        speakers = [a, b] * 10
        count = rng.randint(8, 16)
        sessions.append([(speakers[i], rng.choice(SMALL_TALK), "") for i in range(count)])
    items: list[tuple[datetime, str, Any]] = []
    questions: list[dict[str, Any]] = []
    plans = []
    for event in EVENTS:
        rows = rng.sample(event["rows"], 2)
        for teller, friend, row in ((a, b, rows[0]), (b, a, rows[1])):
            plans.append((event, teller, friend, row))
    rng.shuffle(plans)
    free = list(range(1, SESSIONS - 1))
    rng.shuffle(free)
    for pos, (event, teller, friend, row) in enumerate(plans):
        s = free[pos % len(free)]
        slots = {**row, "p": teller, "q": friend}
        tag = f"{event['key']}:{teller}"
        split = rng.random() < 0.35
        if split:
            first, second = (t.format(**slots) for t in event["split"])
            lines = [
                (teller, first, tag),
                (friend, rng.choice(event["friend"]), ""),
                (teller, second, tag),
            ]
        else:
            lines = [(teller, rng.choice(event["say"]).format(**slots), tag)]
        at = rng.randint(0, len(sessions[s]))
        sessions[s][at:at] = lines
        day = days[s]
        kinds = [
            ("multi-hop" if split else "single-hop", rng.choice(event["hop" if split else "ask"]))
        ]
        if rng.random() < 0.75:
            kinds.append(("temporal", rng.choice(event["when"])))
        if rng.random() < 0.4:
            kinds.append(("open-domain", rng.choice(event["infer"])))
        for kind, template in kinds:
            if kind == "temporal":
                rel, asked = relative(rng, day)
                text = template.format(**slots, rel=rel)
            else:
                text = template.format(**slots)
                asked = day + timedelta(days=rng.randint(1, (days[-1] - day).days + 20))
            questions.append(
                {"kind": kind, "text": text, "tag": tag, "asked": _at(rng, asked, 9, 23)}
            )
    for s, day in enumerate(days):
        t = _at(rng, day, 8, 20)
        for who, text, tag in sessions[s]:
            items.append((t, "turn", (f"{who}: {text}", tag)))
            t += timedelta(minutes=rng.randint(1, 6), seconds=rng.randint(0, 59))
    for n, q in enumerate(questions):
        q["id"] = f"{a.lower()}-{n:03d}"
        items.append((q["asked"], "question", q))
        if rng.random() < 0.5:
            # The user asked this once before, in other words (an earlier near-duplicate).
            first = [t for t, kind, p in items if kind == "turn" and p[1] == q["tag"]][0]
            span = max(1, int((q["asked"] - first).total_seconds() // 60) - 5)
            earlier = first + timedelta(minutes=rng.randint(2, span))
            if q["kind"] != "temporal":
                items.append((earlier, "echo", rng.choice(RE_ASK).format(q=q["text"])))
    items.sort(key=lambda x: x[0])
    return {"name": a.lower(), "owner": OWNER_BASE + index, "friends": [a, b], "items": items}


def generate(seed: int = SEED) -> dict[str, Any]:
    """Return the whole set as JSON-ready data."""
    rng = random.Random(seed)
    out = []
    for index in range(len(PAIRS)):
        raw = _conversation(rng, index)
        messages: list[list[Any]] = []
        questions = []
        answers: dict[str, list[int]] = {}
        own = []

        def add(role: str, text: str, when: datetime, messages: list[list[Any]] = messages) -> int:
            messages.append([len(messages) + 1, role, text, when.isoformat()])
            return len(messages)

        for when, kind, payload in raw["items"]:
            # After the message before it, the bot's reply included.
            when = when.replace(tzinfo=ZONE)
            if messages:
                when = max(when, datetime.fromisoformat(messages[-1][3]) + timedelta(seconds=1))
            if kind == "turn":
                text, tag = payload
                number = add("user", stamp(text, when, _SETTINGS), when)
                if tag:
                    answers.setdefault(tag, []).append(number)
                add("assistant", rng.choice(ACKS), when + timedelta(seconds=4))
                continue
            text = payload["text"] if kind == "question" else payload
            number = add("user", stamp(text, when, _SETTINGS), when)
            own.append(number)
            add("assistant", rng.choice(ANSWER_REPLIES), when + timedelta(seconds=6))
            if kind == "question":
                questions.append({**payload, "number": number, "asked": when.isoformat()})
        for q in questions:
            q["answers"] = answers[q.pop("tag")]
        out.append(
            {
                **{k: raw[k] for k in ("name", "owner", "friends")},
                "own": own,
                "messages": messages,
                "questions": questions,
            }
        )
    return {"seed": seed, "kinds": list(KINDS), "conversations": out}


def load(path: Path = PATH) -> Dataset:
    """Return the set written by `python -m bench.dialogues` as the recall bench's data."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    convs = []
    questions = []
    for c in raw["conversations"]:
        messages = tuple(
            Message(n, role, text, datetime.fromisoformat(at))
            for n, role, text, at in c["messages"]
        )
        convs.append(Conversation(c["name"], "en", c["owner"], messages, frozenset(c["own"])))
        for q in c["questions"]:
            questions.append(
                Question(
                    q["id"],
                    c["name"],
                    "en",
                    q["kind"],
                    q["text"],
                    tuple(q["answers"]),
                    q["id"],
                    asked=datetime.fromisoformat(q["asked"]),
                    number=q["number"],
                )
            )
    return Dataset(tuple(convs), tuple(questions), raw["seed"])


def main() -> int:
    """Write the set to bench/data/dialogues.json."""
    data = generate()
    PATH.write_text(json.dumps(data, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    n = sum(len(c["questions"]) for c in data["conversations"])
    m = sum(len(c["messages"]) for c in data["conversations"])
    print(f"wrote {PATH}: {m} messages, {n} questions", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
