"""Dates named in a search, as a range relative to the question's moment."""

from __future__ import annotations

from datetime import date, datetime
from zoneinfo import ZoneInfo

import pytest

from src.storage.search_dates import date_range, without_filler
from src.storage.search_ranking import held, is_echo, rerank

ZONE = ZoneInfo("Europe/Moscow")
# A Friday evening.
NOW = datetime(2026, 3, 13, 20, 0, tzinfo=ZONE)


@pytest.mark.parametrize(
    ("query", "first", "last", "rest"),
    [
        (
            "What did Tom cook last Tuesday?",
            date(2026, 3, 10),
            date(2026, 3, 10),
            "What did Tom cook ?",
        ),
        ("what happened on Friday", date(2026, 3, 6), date(2026, 3, 6), "what happened"),
        ("this past Wednesday", date(2026, 3, 11), date(2026, 3, 11), ""),
        ("yesterday's concert", date(2026, 3, 12), date(2026, 3, 12), "'s concert"),
        ("the day before yesterday", date(2026, 3, 11), date(2026, 3, 11), ""),
        ("three days ago", date(2026, 3, 9), date(2026, 3, 11), ""),
        ("two weeks ago", date(2026, 2, 24), date(2026, 3, 2), ""),
        ("a week ago", date(2026, 3, 3), date(2026, 3, 9), ""),
        ("last weekend", date(2026, 3, 7), date(2026, 3, 8), ""),
        ("last week", date(2026, 3, 2), date(2026, 3, 8), ""),
        ("last month", date(2026, 2, 1), date(2026, 2, 28), ""),
        ("trip in March", date(2026, 3, 1), date(2026, 3, 13), "trip"),
        # A date named with its year: the day, a day either side; a month of a year whole.
        (
            "What painting did Mel show on October 13, 2025?",
            date(2025, 10, 12),
            date(2025, 10, 14),
            "What painting did Mel show ?",
        ),
        ("store news on 1 February, 2026", date(2026, 1, 31), date(2026, 2, 2), "store news"),
        (
            "what did Joanna win in January 2022?",
            date(2022, 1, 1),
            date(2022, 1, 31),
            "what did Joanna win ?",
        ),
        (
            "finished last Friday on 23 January, 2026",
            date(2026, 1, 22),
            date(2026, 1, 24),
            "finished last Friday",
        ),
        ("что было 5 марта 2025 года", date(2025, 3, 4), date(2025, 3, 6), "что было"),
        ("trip in November", date(2025, 11, 1), date(2025, 11, 30), "trip"),
        ("что я ел в прошлый вторник", date(2026, 3, 10), date(2026, 3, 10), "что я ел"),
        ("во вторник", date(2026, 3, 10), date(2026, 3, 10), ""),
        ("вчера", date(2026, 3, 12), date(2026, 3, 12), ""),
        ("позавчера", date(2026, 3, 11), date(2026, 3, 11), ""),
        ("две недели назад", date(2026, 2, 24), date(2026, 3, 2), ""),
        ("неделю назад", date(2026, 3, 3), date(2026, 3, 9), ""),
        ("на прошлой неделе", date(2026, 3, 2), date(2026, 3, 8), ""),
        ("в прошлые выходные", date(2026, 3, 7), date(2026, 3, 8), ""),
        ("в прошлом месяце", date(2026, 2, 1), date(2026, 2, 28), ""),
        ("поездка в марте", date(2026, 3, 1), date(2026, 3, 13), "поездка"),
        ("в среду", date(2026, 3, 11), date(2026, 3, 11), ""),
    ],
)
def test_relative_dates(query: str, first: date, last: date, rest: str) -> None:
    found = date_range(query, NOW)
    assert found is not None
    assert (found.since.date(), found.until.date()) == (
        first,
        date.fromordinal(last.toordinal() + 1),
    )
    assert found.since.tzinfo is ZONE
    assert found.rest == rest


@pytest.mark.parametrize(
    "query",
    [
        "May I ask about the trip?",
        "среди друзей",
        "маяк",
        "a weekly report",
        "March 14 plans",
        "среднее",
    ],
)
def test_no_date(query: str) -> None:
    assert date_range(query, NOW) is None


@pytest.mark.parametrize(
    ("query", "left"),
    [
        # A date and words that only ask what was said or done: nothing else to search.
        ("what happened yesterday?", "what ?"),
        ("What did I say last Tuesday?", "What did I ?"),
        ("what did we talk about two weeks ago", "what did we about"),
        ("what was going on last weekend?", "what was ?"),
        ("что было вчера?", "что было ?"),
        ("что мы обсуждали в прошлую среду?", "что мы ?"),
        ("о чём я писал позавчера", "о чём я"),
        ("напомни, что случилось на прошлой неделе", ", что"),
        # Something to search for stays.
        ("what did Tom cook last Tuesday?", "what did Tom cook ?"),
        ("what did I say about the concert yesterday", "what did I about the concert"),
        ("что я ел вчера", "что я ел"),
    ],
)
def test_what_a_dated_question_asks_for_besides_the_date(query: str, left: str) -> None:
    found = date_range(query, NOW)
    assert found is not None
    assert without_filler(found.rest) == left


def test_earlier_askings_of_the_same_question() -> None:
    query = "What is Tom's new pet called?"
    assert is_echo(
        query, "[Текущее время: 2026-03-01 10:00] Remind me, what is Tom's new pet called?"
    )
    assert is_echo(query, "what's the name of Tom's new pet called again?")
    # An answer is no question; a question about something else is no asking again, nor
    # is a friend's question that shares the query's subject.
    assert not is_echo(query, "Tom: we brought home a new puppy called Biscuit")
    assert not is_echo(query, "Tom: what should I cook for the new neighbours on Friday?")
    assert not is_echo(
        "When did Caroline go to the LGBTQ support group?",
        "Melanie: Did you get to the LGBTQ support group yesterday?",
    )


def test_only_known_noise_is_set_aside_never_a_question_for_being_one() -> None:
    query = "What is Tom's new pet called?"
    rows = [
        {"id": 1, "role": "user", "content": "Remind me, what is Tom's new pet called?"},
        {"id": 2, "role": "user", "content": "Maya: did Tom call the new puppy Biscuit?"},
        {"id": 5, "role": "user", "content": "Which pet did Tom get?", "searched": True},
        {"id": 3, "role": "user", "content": "Tom: a puppy, Biscuit!"},
        {"id": 4, "role": "assistant", "content": "What is Tom's new pet called? Biscuit."},
    ]
    # The earlier asking of the query and the user's question that had the bot search
    # go last, in their order; a friend's question that tells the answer keeps its place.
    assert [r["id"] for r in rerank(query, rows)] == [2, 3, 4, 1, 5]


def test_the_lexical_rankings_first_hits_are_held_among_the_results() -> None:
    query = "Where is Marco staying in Lisbon?"
    rows = [{"id": n, "role": "user", "content": f"turn {n}"} for n in range(1, 21)]
    rows.append({"id": 30, "role": "user", "content": "Lisbon?", "searched": True})
    # The fusion put the lexical ranking's second and third hits past the first ten.
    lexical = [30, 4, 15, 18, 2]
    found = [r["id"] for r in held(query, rows, lexical, 10)]
    # The user's own search is noise, never held; of the rest the first three are in
    # the ten, in the last places, and the fused order stays otherwise.
    assert found == [1, 2, 3, 4, 5, 6, 7, 8, 15, 18]
    # A smaller limit holds fewer (a third of it).
    assert [r["id"] for r in held(query, rows, lexical, 3)] == [1, 2, 4]
    assert [r["id"] for r in held(query, rows, lexical, 6)] == [1, 2, 3, 4, 5, 15]
