"""Dates a user names in a search ("last Tuesday", "two weeks ago", "в марте"), as a time
range relative to the moment of the question, in Russian and English.

A question about the past names its day the way people do; the search ranks the
messages of that range first and drops the date's words from the terms it looks up
(they would match every "week" and "Tuesday" of the history).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

# Day names and month names: English, and every Russian form as a whole word.
WEEKDAYS = (
    ("monday", r"понедельник\w*"),
    ("tuesday", r"вторник\w*"),
    ("wednesday", r"сред[аеуы]"),
    ("thursday", r"четверг\w*"),
    ("friday", r"пятниц[аеуы]"),
    ("saturday", r"суббот[аеуы]"),
    ("sunday", r"воскресень[еяю]"),
)
MONTHS = (
    ("january", r"январ[ьяе]"),
    ("february", r"феврал[ьяе]"),
    ("march", r"март[ае]?"),
    ("april", r"апрел[ьяе]"),
    ("may", r"ма[йяе]"),
    ("june", r"июн[ьяе]"),
    ("july", r"июл[ьяе]"),
    ("august", r"август[ае]?"),
    ("september", r"сентябр[ьяе]"),
    ("october", r"октябр[ьяе]"),
    ("november", r"ноябр[ьяе]"),
    ("december", r"декабр[ьяе]"),
)
NUMBERS = {
    "a": 1, "an": 1, "one": 1, "a couple of": 2, "couple of": 2, "two": 2, "three": 3,
    "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
    "один": 1, "одну": 1, "два": 2, "две": 2, "пару": 2, "три": 3, "четыре": 4, "пять": 5,
    "шесть": 6, "семь": 7, "восемь": 8, "девять": 9, "десять": 10,
}  # fmt: skip
_NUMBER = "|".join(sorted((re.escape(n) for n in NUMBERS), key=len, reverse=True)) + r"|\d{1,2}"
_WEEKDAY = "|".join(f"(?P<wd{i}>{en}|{ru})" for i, (en, ru) in enumerate(WEEKDAYS))
_MONTH = "|".join(f"(?P<mo{i}>{en}|{ru})" for i, (en, ru) in enumerate(MONTHS))
_UNITS = {"day": 1, "дн": 1, "ден": 1, "week": 7, "недел": 7, "month": 30, "месяц": 30}
_UNIT = r"(?P<unit>days?|weeks?|months?|дн\w*|ден\w*|недел\w*|месяц\w*)"

_DAY = r"(?P<d>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<y>(?:19|20)\d\d)(?:\s*(?:г\.|года|год))?"
# Each pattern names its kind; the first match in the text wins. A date with its year
# ("on 13 October, 2023", "October 13, 2023", "in July 2022", "5 марта 2023 года") is
# named outright, so it comes first ("last Friday, 23 January 2022" means the date).
PATTERNS = [
    ("date", rf"(?:on\s+|the\s+)?{_DAY}(?:\s+of)?\s+(?:{_MONTH}),?\s+{_YEAR}"),
    ("date", rf"(?:on\s+)?(?:{_MONTH})\s+{_DAY},?\s+{_YEAR}"),
    ("month_year", rf"(?:(?:in|during|back\s+in)\s+|в\s+)?(?:{_MONTH}),?\s+(?:of\s+)?{_YEAR}"),
    ("before_yesterday", r"(?:the\s+)?day\s+before\s+yesterday|позавчера"),
    ("yesterday", r"yesterday|вчера\w*"),
    ("today", r"today|tonight|this\s+morning|сегодня"),
    ("ago", rf"(?P<n>{_NUMBER})?\s*{_UNIT}\s+(?:ago|назад)"),
    ("last_weekend", r"(?:last|this\s+past)\s+weekend|(?:в|на)\s+прошлы[ех]\s+выходны[ех]"),
    ("last_week", r"last\s+week|на\s+прошлой\s+неделе"),
    ("last_month", r"last\s+month|в\s+прошлом\s+месяце"),
    ("weekday", rf"(?:(?:last|this\s+past|on)\s+|(?:в|во)\s+(?:прошл\w+\s+)?)?(?:{_WEEKDAY})"),
    ("month", rf"(?:(?:in|during|back\s+in)\s+|в\s+)?(?:{_MONTH})(?!\s*\d)"),
]
_COMPILED = [
    (kind, re.compile(rf"(?<!\w)(?:{pattern})(?!\w)", re.IGNORECASE)) for kind, pattern in PATTERNS
]
# Words that ask what was said or done without saying about what: with a date and stop
# words only, a question asks for the day itself ("what did we talk about yesterday?",
# "что мы обсуждали вчера?"). Stop words are the search's to drop (by the query's
# language); these are content words to a stemmer, and would be searched for.
FILLER = re.compile(
    r"(?<!\w)(?:happen\w*|going\s+on|went\s+on|up\s+to|say|says|said|tell|told|talk\w*"
    r"|discuss\w*|chat\w*|speak\w*|spoke\w*|writ\w*|wrote|mention\w*|messag\w*"
    r"|send|sent|conversations?|anything|something|everything|remind"
    r"|происход\w*|произош\w*|случ\w*|говор\w*|сказ\w*|обсужд\w*|писа\w*|напис\w*"
    r"|рассказ\w*|болта\w*|переписк\w*|сообщен\w*|разговор\w*|напомн\w*|покаж\w*"
    r"|что-(?:то|нибудь)|дела\w*)(?!\w)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class DateRange:
    """A time range named in a query, and the query without its words."""

    since: datetime
    until: datetime
    """Exclusive."""
    rest: str
    """The query with the date's words taken out."""


def date_range(query: str, now: datetime) -> DateRange | None:
    """Return the range of the first date `query` names relative to `now`, or None."""
    for kind, pattern in _COMPILED:
        match = pattern.search(query)
        if match is None:
            continue
        span = _span(kind, match, now.date())
        if span is None:
            continue
        first, last = span
        rest = " ".join((query[: match.start()] + " " + query[match.end() :]).split())
        start = datetime.combine(first, time.min, tzinfo=now.tzinfo)
        end = datetime.combine(last + timedelta(days=1), time.min, tzinfo=now.tzinfo)
        return DateRange(start, end, rest)
    return None


def without_filler(text: str) -> str:
    """Return `text` without the words that ask what was said or done (`FILLER`): what
    is left says what the question is about, if anything."""
    return " ".join(FILLER.sub(" ", text).split())


def _span(kind: str, match: re.Match[str], today: date) -> tuple[date, date] | None:
    """Return the first and last day (inclusive) a match names."""
    if kind in ("date", "month_year"):
        return _dated(kind, match)
    if kind == "today":
        return today, today
    if kind == "yesterday":
        return today - timedelta(days=1), today - timedelta(days=1)
    if kind == "before_yesterday":
        return today - timedelta(days=2), today - timedelta(days=2)
    if kind == "ago":
        unit = next(d for stem, d in _UNITS.items() if match["unit"].lower().startswith(stem))
        n = _number(match["n"])
        day = today - timedelta(days=n * unit)
        # People round: a day either side for days, half a week for weeks, a fortnight.
        slack = {1: 1, 7: 3, 30: 15}[unit]
        return day - timedelta(days=slack), min(today, day + timedelta(days=slack))
    if kind == "last_weekend":
        saturday = today - timedelta(days=(today.weekday() - 5) % 7 or 7)
        return saturday, saturday + timedelta(days=1)
    if kind == "last_week":
        monday = today - timedelta(days=today.weekday() + 7)
        return monday, monday + timedelta(days=6)
    if kind == "last_month":
        end = today.replace(day=1) - timedelta(days=1)
        return end.replace(day=1), end
    if kind == "weekday":
        wanted = _group(match, "wd")
        day = today - timedelta(days=(today.weekday() - wanted) % 7 or 7)
        return day, day
    if kind == "month":
        month = _group(match, "mo") + 1
        if month == 5 and match.group(0).lower().strip() == "may":
            return None  # "may" alone is the verb more often than the month
        year = today.year if month <= today.month else today.year - 1
        first = date(year, month, 1)
        last = (first.replace(day=28) + timedelta(days=4)).replace(day=1) - timedelta(days=1)
        return first, min(last, today)
    return None


def _dated(kind: str, match: re.Match[str]) -> tuple[date, date] | None:
    """Return the range of a date named with its year: the day with a day either side
    (people and time zones round), or the whole month."""
    year, month = int(match["y"]), _group(match, "mo") + 1
    try:
        if kind == "month_year":
            first = date(year, month, 1)
            return first, (first.replace(day=28) + timedelta(days=4)).replace(day=1) - timedelta(
                days=1
            )
        day = date(year, month, int(match["d"]))
    except ValueError:
        return None  # "31 February 2023": not a date
    return day - timedelta(days=1), day + timedelta(days=1)


def _number(word: str | None) -> int:
    if not word:
        return 1
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else NUMBERS.get(word, 1)


def _group(match: re.Match[str], prefix: str) -> int:
    """Return the index of the named group (`wd3`, `mo11`) that matched."""
    return next(
        int(k[len(prefix) :]) for k, v in match.groupdict().items() if v and k.startswith(prefix)
    )
