"""Synthetic long conversations with planted facts, and questions that know their answers.

The recall bench (bench/recall.py) needs questions whose answering turns are known. This
builds them without a network or a model, from a seeded RNG: a few long conversations
in Russian and English (chit-chat of varied length on everyday topics, an assistant
reply after every user turn, sessions days apart), with facts planted in single user
turns (a job, a pet, trips with dates, preferences, family, purchases, health, plans),
some corrected later, and questions of five kinds:

- lexical: shares a content word with the answering turn, often in another word form
  ("Когда я была в Эрмитаже?" for "Сходила сегодня в Эрмитаж");
- paraphrase: shares no content word with it ("What does she do for a living?" for
  "I work as a nurse"), checked by `problems`;
- time: asks when; the answer turn's time stamp or its text holds the date;
- date: asks what happened on a day; only the answer turn's time stamp holds the date;
- stopword: a lexical question behind a long run of filler and stop words, so the
  content words come late.

User turns are stored as the product stores them, stamped `[Текущее время: YYYY-MM-DD
HH:MM] text` (src.graph.timestamps.stamp); assistant replies are plain. The user also
asks the bot about some facts before the bench does, in the same words, and gets no
answer ("echo" turns): the user's own earlier questions that crowd search results.

The words of each language (chit-chat, replies, personas, fact templates) are data, in
bench/data/recall_ru.json and bench/data/recall_en.json; this module generates from them.

    from bench.recall_data import generate
    dataset = generate()          # 4 conversations x 360 user turns, ~360 questions
"""

from __future__ import annotations

import json
import random
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

from src.graph.timestamps import stamp, strip_stamp

SEED = 20261123
ZONE = ZoneInfo("Europe/Moscow")
TIME_LABEL = "Текущее время"
KINDS = ("lexical", "paraphrase", "time", "date", "stopword")
LANGUAGES = ("ru", "en")
CONVERSATIONS = ("ru", "ru", "en", "en")
USER_TURNS = 360
# Owners of the bench's conversations: far from the ids other benches and tests use.
OWNER_BASE = 7_100_000
START = datetime(2026, 1, 12, 9, 0, tzinfo=ZONE)

_SETTINGS = SimpleNamespace(zone=ZONE, time_label=TIME_LABEL)


# --- data -------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One stored message; `number` counts from 1 in its conversation, as in the table."""

    number: int
    role: str
    content: str
    created_at: datetime


@dataclass(frozen=True)
class Conversation:
    """One owner's long conversation."""

    name: str
    language: str
    owner: int
    messages: tuple[Message, ...]
    # Message numbers of the user's own recall questions (the "echo" turns).
    echoes: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Question:
    """A question over one conversation and the numbers of the turns that answer it."""

    id: str
    conversation: str
    language: str
    kind: str
    text: str
    answers: tuple[int, ...]
    fact: str
    echoes: tuple[int, ...] = ()
    # When the user asks it and its own stored message (bench/dialogues.py): the search
    # runs "now" at that time and leaves the question's own message out.
    asked: datetime | None = None
    number: int | None = None


@dataclass(frozen=True)
class Dataset:
    """Conversations and the questions over them."""

    conversations: tuple[Conversation, ...]
    questions: tuple[Question, ...]
    seed: int

    def conversation(self, name: str) -> Conversation:
        """Return the conversation called `name`."""
        return next(c for c in self.conversations if c.name == name)


@dataclass(frozen=True)
class Fact:
    """A fact template: how it is said, corrected, asked about, and what looks like it.

    Every string is a `str.format` template over one row of `values` plus the persona's
    words (`{a}`: the Russian feminine past ending, `{she}`, `{her}`, ...) and `{when}`,
    a date `in_days` after the turn that says it. A value key ending in `@f` or `@m`
    applies to a female or male persona only.
    """

    key: str
    values: tuple[dict[str, str], ...]
    say: tuple[str, ...]
    lexical: tuple[str, ...]
    paraphrase: tuple[str, ...]
    time: tuple[str, ...] = ()
    # True when the fact is an event of the day it is told ("went to the museum today"),
    # so "what did I do on <date>?" has it as its answer.
    event: bool = False
    correct: tuple[str, ...] = ()
    distract: tuple[str, ...] = ()
    in_days: tuple[int, int] = (14, 60)
    # After a correction the corrected turn answers a question ("new"), unless the
    # question asks about what the correction left alone: then the first statement
    # ("old"), or either ("any"). Keyed by question template.
    after_correction: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Language:
    """Everything language-specific: chit-chat, replies, personas, dates."""

    code: str
    topics: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]
    short: tuple[str, ...]
    acks: tuple[str, ...]
    echo_prefixes: tuple[str, ...]
    echo_replies: tuple[str, ...]
    lead_ins: tuple[str, ...]
    date_questions: tuple[str, ...]
    months: tuple[str, ...]
    personas: tuple[dict[str, str], ...]
    facts: tuple[Fact, ...]
    # Passing thoughts, composed (opener + thought + closer) for variety.
    muse: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]] = (
        (),
        (),
        (),
        (),
    )
    stopwords: frozenset[str] = field(default_factory=frozenset)

    def format_date(self, day: date) -> str:
        """Return `day` as people write it: "14 марта", "March 14"."""
        month = self.months[day.month - 1]
        return f"{day.day} {month}" if self.code == "ru" else f"{month} {day.day}"


# --- the languages' words, from bench/data/ ------------------------------------------

DATA = Path(__file__).resolve().parent / "data"


def _tuples(value: Any) -> Any:
    """Return JSON's lists as tuples, at every depth (the dataclasses hold tuples)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def load_language(code: str) -> Language:
    """Return one language's words, from `bench/data/recall_{code}.json`."""
    raw = _tuples(json.loads((DATA / f"recall_{code}.json").read_text(encoding="utf-8")))
    facts = tuple(Fact(**fact) for fact in raw.pop("facts"))
    stopwords = frozenset(raw.pop("stopwords", ()))
    return Language(**raw, facts=facts, stopwords=stopwords)


RU = load_language("ru")
EN = load_language("en")

LANGS = {"ru": RU, "en": EN}


# --- words, for checking the questions --------------------------------------------

_WORD = re.compile(r"\w+")


def content_words(text: str, language: str) -> set[str]:
    """Return the content words of `text`: no time stamp, stop words, numbers."""
    stop = LANGS[language].stopwords
    return {
        w
        for w in _WORD.findall(strip_stamp(text).lower().replace("ё", "е"))
        if len(w) >= 3 and w not in stop and not w.isdigit()
    }


def _key(word: str) -> str:
    return word[:3] if len(word) <= 4 else word[:4]


def same_word(a: str, b: str) -> bool:
    """Tell forms of one word from other words, roughly and without a stemmer.

    The same first 4 letters (3 when a word has at most 4) and at most 3 letters apart
    in length: "кот"/"кота", "работаю"/"работу", "name"/"named", not "bed"/"bedtime".
    """
    need = 3 if min(len(a), len(b)) <= 4 else 4
    return a[:need] == b[:need] and abs(len(a) - len(b)) <= 3


def shared_words(question: str, turn: str, language: str) -> set[str]:
    """Return the question's content words found in `turn` in some form."""
    turn_words = content_words(turn, language)
    return {
        q for q in content_words(question, language) if any(same_word(q, t) for t in turn_words)
    }


def shared_keys(question: str, turn: str, language: str) -> set[str]:
    """Return the question's content words that so much as begin like one of `turn`'s.

    Looser than `shared_words` on purpose ("bed" and "bedtime" count): a paraphrase
    must share none of these.
    """
    turn_keys = {_key(t) for t in content_words(turn, language)}
    return {
        q
        for q in content_words(question, language)
        if any(t.startswith(_key(q)) or _key(q).startswith(t) for t in turn_keys)
    }


# --- generation -------------------------------------------------------------------


def _fill(template: str, slots: dict[str, str]) -> str:
    return template.format_map(slots)


def _slots(fact: Fact, row: dict[str, str], persona: dict[str, str]) -> dict[str, str]:
    gender = persona["gender"]
    slots = dict(persona)
    for key, value in row.items():
        if "@" not in key:
            slots[key] = value
        elif key.endswith("@" + gender):
            slots[key[:-2]] = value
    return slots


def _timeline(rng: random.Random, start: datetime, count: int) -> list[datetime]:
    """Return `count` local times: sessions of 2-9 turns minutes apart, 1-4 days apart."""
    times: list[datetime] = []
    day = start
    while len(times) < count:
        day += timedelta(days=rng.choice((1, 1, 2, 2, 3, 4)))
        t = day.replace(hour=rng.randint(8, 22), minute=rng.randint(0, 59))
        for _ in range(rng.randint(2, 9)):
            if len(times) == count:
                break
            times.append(t)
            t += timedelta(minutes=rng.randint(1, 7), seconds=rng.randint(0, 59))
    return times


def _capitalize_after(lead: str, question: str) -> str:
    return lead + question[0].lower() + question[1:]


class _Slots:
    """Free user-turn positions of a conversation, handed out at random."""

    def __init__(self, rng: random.Random, count: int) -> None:
        self.rng = rng
        self.count = count
        self.taken: set[int] = set()

    def pick(self, low: int, high: int) -> int | None:
        low, high = max(0, low), min(self.count, high)
        free = [i for i in range(low, high) if i not in self.taken]
        if not free:
            return None
        pos = self.rng.choice(free)
        self.taken.add(pos)
        return pos


@dataclass
class _Plan:
    """Where one fact's turns go, and its filled-in slots."""

    fact: Fact
    slots: dict[str, str]
    say: int
    correct: int | None = None
    echoes: list[int] = field(default_factory=list)
    distract: list[int] = field(default_factory=list)


def _answers(plan: _Plan, template: str) -> list[int]:
    """Return the user turns that answer the question made from `template`."""
    if plan.correct is None:
        return [plan.say]
    mode = plan.fact.after_correction.get(template, "new")
    return {"new": [plan.correct], "old": [plan.say], "any": [plan.say, plan.correct]}[mode]


def _fresh(rng: random.Random, lines: Sequence[str], n: int, recent: deque[str]) -> list[str]:
    """Pick `n` lines, avoiding the recently used ones while there are others."""
    unused = [line for line in lines if line not in recent]
    pool = unused if len(unused) >= n else list(lines)
    picked = rng.sample(pool, min(n, len(pool)))
    recent.extend(picked)
    return picked


def _filler(rng: random.Random, lang: Language, topic: str, recent: deque[str]) -> tuple[str, str]:
    """Return a chit-chat exchange: on `topic` (short, usual or long), or a passing thought."""
    user_lines, bot_lines = lang.topics[topic]
    roll = rng.random()
    if roll < 0.15:
        user = rng.choice(lang.short)
        bot = _fresh(rng, bot_lines, 1, recent)[0]
    elif roll < 0.35:
        openers, thoughts, closers, replies = lang.muse
        thought = _fresh(rng, thoughts, 1, recent)[0]
        user = f"{rng.choice(openers)} {thought}.{rng.choice(closers)}"
        bot = rng.choice(replies)
    else:
        n = rng.randint(4, 5) if roll > 0.93 else rng.randint(1, 3)
        user = " ".join(_fresh(rng, user_lines, n, recent))
        bot = " ".join(_fresh(rng, bot_lines, rng.randint(1, 4), recent))
    return user, bot


def conversation(
    lang: Language,
    variant: int,
    owner: int,
    user_turns: int,
    facts: int | None,
    seed: int,
) -> tuple[Conversation, list[Question]]:
    """Build one conversation and its questions."""
    name = f"{lang.code}-{variant + 1}"
    rng = random.Random(f"{seed}:{name}")
    persona = lang.personas[variant % len(lang.personas)]
    chosen = list(lang.facts)
    rng.shuffle(chosen)
    chosen = chosen[: facts or len(chosen)]
    n = user_turns
    slots = _Slots(rng, n)
    plans: list[_Plan] = []
    # Facts are told in the first 80% of the conversation, so corrections and the
    # user's own recall questions can come after them.
    for fact in chosen:
        say = slots.pick(1, max(2, int(n * 0.8)))
        if say is None:
            break
        row = fact.values[(variant + rng.randrange(len(fact.values))) % len(fact.values)]
        plan = _Plan(fact, _slots(fact, row, persona), say)
        if fact.correct and rng.random() < 0.7:
            plan.correct = slots.pick(say + max(3, n // 20), n)
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            echo = slots.pick(say + 1, n)
            if echo is not None:
                plan.echoes.append(echo)
        for _ in fact.distract:
            if rng.random() < 0.8:
                spot = slots.pick(0, n)
                if spot is not None:
                    plan.distract.append(spot)
        plans.append(plan)

    times = _timeline(rng, START + timedelta(days=7 * variant + (3 if lang.code == "en" else 0)), n)
    turns: list[tuple[str, str] | None] = [None] * n
    events: dict[date, list[int]] = {}

    def render(template: str, plan: _Plan, at: int) -> str:
        low, high = plan.fact.in_days
        when = times[at].date() + timedelta(days=rng.randint(low, high))
        return _fill(template, {**plan.slots, "when": lang.format_date(when)})

    for plan in plans:
        fact = plan.fact
        turns[plan.say] = (render(rng.choice(fact.say), plan, plan.say), rng.choice(lang.acks))
        if fact.event:
            events.setdefault(times[plan.say].date(), []).append(plan.say)
        if plan.correct is not None:
            text = render(rng.choice(fact.correct), plan, plan.correct)
            turns[plan.correct] = (text, rng.choice(lang.acks))
        for echo in plan.echoes:
            asked = _fill(rng.choice(fact.lexical), plan.slots)
            turns[echo] = (
                _capitalize_after(rng.choice(lang.echo_prefixes), asked),
                rng.choice(lang.echo_replies),
            )
        for spot, template in zip(plan.distract, fact.distract, strict=False):
            turns[spot] = (render(template, plan, spot), rng.choice(lang.acks))

    topic = rng.choice(list(lang.topics))
    recent: deque[str] = deque(maxlen=24)
    messages: list[Message] = []
    for i in range(n):
        if turns[i] is None:
            # A conversation stays on a topic for a few turns, then drifts.
            if rng.random() < 0.6:
                topic = rng.choice(list(lang.topics))
            user, bot = _filler(rng, lang, topic, recent)
            user = _fill(user, persona)
        else:
            user, bot = turns[i]  # type: ignore[misc]
        at = times[i]
        messages.append(Message(2 * i + 1, "user", stamp(user, at, _SETTINGS), at.astimezone(UTC)))
        reply_at = at + timedelta(seconds=rng.randint(4, 40))
        messages.append(Message(2 * i + 2, "assistant", bot, reply_at.astimezone(UTC)))

    echoes = frozenset(2 * e + 1 for p in plans for e in p.echoes)
    questions: list[Question] = []

    def ask(kind: str, text: str, answers: Sequence[int], plan: _Plan) -> None:
        questions.append(
            Question(
                id=f"{name}/{len(questions) + 1:03d}",
                conversation=name,
                language=lang.code,
                kind=kind,
                text=text,
                answers=tuple(2 * a + 1 for a in answers),
                fact=plan.fact.key,
                echoes=tuple(2 * e + 1 for e in plan.echoes),
            )
        )

    for plan in sorted(plans, key=lambda p: p.say):
        fact = plan.fact
        lexical = rng.choice(fact.lexical)
        ask("lexical", _fill(lexical, plan.slots), _answers(plan, lexical), plan)
        paraphrase = rng.choice(fact.paraphrase)
        ask("paraphrase", _fill(paraphrase, plan.slots), _answers(plan, paraphrase), plan)
        if fact.time:
            when = rng.choice(fact.time)
            ask("time", _fill(when, plan.slots), _answers(plan, when), plan)
        if fact.event and rng.random() < 0.6:
            day = times[plan.say].date()
            template = rng.choice(lang.date_questions)
            text = _fill(template, {**plan.slots, "date": lang.format_date(day)})
            ask("date", text, events[day], plan)
        if rng.random() < 0.35:
            lead = _fill(rng.choice(lang.lead_ins), plan.slots)
            core = rng.choice(fact.lexical)
            text = _capitalize_after(lead, _fill(core, plan.slots))
            ask("stopword", text, _answers(plan, core), plan)

    conv = Conversation(name, lang.code, owner, tuple(messages), echoes)
    return conv, questions


def generate(
    seed: int = SEED,
    user_turns: int = USER_TURNS,
    facts: int | None = None,
    languages: Sequence[str] = CONVERSATIONS,
) -> Dataset:
    """Build the bench's conversations and questions, the same for the same arguments."""
    conversations: list[Conversation] = []
    questions: list[Question] = []
    seen: dict[str, int] = {}
    for index, code in enumerate(languages):
        variant = seen.get(code, 0)
        seen[code] = variant + 1
        conv, asked = conversation(
            LANGS[code], variant, OWNER_BASE + index + 1, user_turns, facts, seed
        )
        conversations.append(conv)
        questions.extend(asked)
    return Dataset(tuple(conversations), tuple(questions), seed)


# --- checks -------------------------------------------------------------------------


def template_problems() -> list[str]:
    """Check every fact template, value row and persona: lexical questions share a word
    (in some form) with every turn that answers them, paraphrases share none with the
    fact's turns, with or without a correction."""
    found: list[str] = []
    for lang in LANGS.values():
        for fact in lang.facts:
            asked = set(fact.lexical + fact.paraphrase + fact.time)
            for template, mode in fact.after_correction.items():
                if template not in asked or mode not in ("old", "any"):
                    found.append(f"{lang.code}/{fact.key}: after_correction {template!r}")
            for row in fact.values:
                for persona in lang.personas:
                    found += _row_problems(lang, fact, _slots(fact, row, persona))
    return sorted(set(found))


def _row_problems(lang: Language, fact: Fact, slots: dict[str, str]) -> list[str]:
    found: list[str] = []
    slots = {**slots, "when": "1 " + lang.months[0]}
    try:
        says = [_fill(t, slots) for t in fact.say]
        corrects = [_fill(t, slots) for t in fact.correct]
        for t in fact.lexical + fact.paraphrase + fact.time + fact.distract:
            _fill(t, slots)
    except KeyError as exc:
        return [f"{lang.code}/{fact.key}: no slot {exc}"]
    for template in fact.lexical:
        q = _fill(template, slots)
        mode = fact.after_correction.get(template, "new")
        # Without a correction a statement answers; with one, as `mode` says.
        targets = says + (corrects if mode != "old" else [])
        for target in targets:
            if not shared_words(q, target, lang.code):
                found.append(f"{lang.code}/{fact.key}: {q!r} shares no word with {target!r}")
    for template in fact.paraphrase:
        q = _fill(template, slots)
        for target in says + corrects:
            if shared := shared_keys(q, target, lang.code):
                found.append(f"{lang.code}/{fact.key}: {q!r} shares {shared} with {target!r}")
    return found


def problems(dataset: Dataset) -> list[str]:
    """Return what is wrong with a dataset: answers that are not user turns, lexical
    questions without a shared word, paraphrases with one."""
    found: list[str] = []
    by_name = {c.name: c for c in dataset.conversations}
    for q in dataset.questions:
        conv = by_name.get(q.conversation)
        if conv is None:
            found.append(f"{q.id}: no conversation {q.conversation}")
            continue
        turns = {m.number: m for m in conv.messages}
        if not q.answers:
            found.append(f"{q.id}: no answer")
        for number in q.answers:
            m = turns.get(number)
            if m is None or m.role != "user":
                found.append(f"{q.id}: answer {number} is not a user turn")
                continue
            if q.kind in ("lexical", "stopword") and not shared_words(
                q.text, m.content, q.language
            ):
                found.append(f"{q.id}: lexical question shares no word: {q.text!r}")
            if q.kind == "paraphrase" and shared_keys(q.text, m.content, q.language):
                found.append(f"{q.id}: paraphrase shares a word: {q.text!r}")
    return found
