"""Hostile and odd input through Telegram: clear answers, no crash, nothing lost."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL, SIDE_MODEL, stored
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.openai_server import message_text

logger = logging.getLogger(__name__)

BOT = "tgagent_test_bot"  # the fake server's bot username
COMPRESS_TEXTS = {t(key, "ru") for key in ("compress_nothing", "compress_declined")}


async def ask(tg: FakeBotAPI, user: int, text: str, **kw: Any) -> str:
    """Send a text as the user and return the bot's (single) answer."""
    chat = kw.get("chat_id", user)
    before = len(tg.messages_to(chat))
    tg.push_text(user, text, **kw)
    return str((await tg.await_messages(chat, before + 1))[-1]["text"])


def unstamped(content: str) -> str:
    """Return a stored user message without its `[time] ` stamp."""
    return content.split("] ", 1)[1]


def echo(request: dict[str, Any]) -> str:
    """Answer with the length of the user's text and its first characters."""
    if request.get("model") == SIDE_MODEL:
        return "[]"  # no facts, an empty summary
    users = [m for m in request["messages"] if m["role"] == "user"]
    text = message_text(users[-1]).rsplit("] ", 1)[-1] if users else ""
    return f"got {len(text)}: {text[:20]!r}"


ODD_TEXTS = [
    "x" * 4096,  # Telegram's longest message
    "Я" * 4096,  # as long, in two-byte UTF-8
    "nul\x00inside\x00and at the end\x00",
    "\u202eright-to-left override\u202c and \u200fRLM\u200e",
    "zero\u200bwidth\u200d\u2060joiners\ufeff",
    "שלום مرحبا mixed ltr rtl",
    "\u200b\u200b\u200b",  # nothing visible
    "'; DROP TABLE messages; -- %s %(x)s {0} $1 \\x00",
    "👩\u200d👩\u200d👧\u200d👦 and combining e\u0301",
]


async def test_odd_texts_are_answered_and_stored(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any, record_property: Any
) -> None:
    user = 8401
    await start_bot()
    llm.default_reply = echo
    answers = [await ask(tg, user, text) for text in ODD_TEXTS]
    assert all(a.startswith("got ") for a in answers), answers
    rows = await stored(pool, user)
    assert [role for role, _ in rows] == ["user", "assistant"] * len(ODD_TEXTS)
    kept = [unstamped(c) for role, c in rows if role == "user"]
    assert kept[:2] == ODD_TEXTS[:2]  # 4096 characters, all of them
    assert kept[2] == ODD_TEXTS[2].replace("\x00", "")  # Postgres text cannot hold NUL
    assert kept[3:] == ODD_TEXTS[3:]
    record(record_property, "odd texts", sent=len(ODD_TEXTS), answered=len(answers), lost=0)


async def test_nul_only_and_blank_messages_get_a_clear_answer(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    user = 8402
    await start_bot()
    for text in ("\x00\x00\x00", " \x00 \n\x00"):
        assert await ask(tg, user, text) == t("empty_message", "ru")
    assert llm.requests_for(CHAT_MODEL) == []
    assert await stored(pool, user) == []


COMMANDS = [  # (text, what the answer must be, or a predicate on it)
    ("/start ref_payload-123", t("greeting", "ru", name="Test")),
    ("/start " + "p" * 64, t("greeting", "ru", name="Test")),
    ("/help me please", t("help", "ru")),
    (f"/help@{BOT}", t("help", "ru")),
    ("/HELP", None),  # any clear answer
    ("/memory", lambda a: a.startswith(t("memory_title", "ru"))),
    ("/memory extra words", lambda a: a.startswith(t("memory_title", "ru"))),
    ("/memory 🧹\x00", lambda a: a.startswith(t("memory_title", "ru"))),
    ("/new@otherbot", t("unknown_command", "ru")),  # another bot's: nothing wiped
    ("/whatever?x=1&y=2", t("unknown_command", "ru")),
    ("/mute please", t("muted", "ru")),
    ("/mute", t("unmuted", "ru")),
]


async def test_commands_with_arguments_of_every_shape(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any, record_property: Any
) -> None:
    user, group = 8403, -100_840_300
    await start_bot(user_rate_limit=0)  # more than 20 commands within the minute
    llm.script_for(CHAT_MODEL, "Запомнил.", "Понял.")
    await ask(tg, user, "Меня зовут Аня")
    await ask(tg, user, "Я люблю чай")
    for text, expected in COMMANDS:
        answer = await ask(tg, user, text)
        assert answer not in (t("internal_error", "ru"), ""), text
        if callable(expected):
            assert expected(answer), (text, answer)
        elif expected is not None:
            assert answer == expected, text
    assert len(await stored(pool, user)) == 4  # /new@otherbot wiped nothing

    focus = ("сосредоточься на чае и на имени; " * 100)[:3000]
    answer = await ask(tg, user, "/compress " + focus)
    assert answer in COMPRESS_TEXTS, answer
    for text in ("/memory clear extra", f"/memory@{BOT} CLEAR"):
        cleared = await ask(tg, user, text)
        assert cleared == t("memory_cleared", "ru", facts=0, compacts=0), text
    assert await ask(tg, user, "/forget now, please!") == t("forget", "ru")
    assert await ask(tg, user, "/new and some words") == t("new", "ru")
    assert await stored(pool, user) == []

    # In a group, a command for another bot is not ours: silence, nothing touched.
    kw: dict[str, Any] = {"chat_type": "supergroup", "chat_id": group}
    llm.script_for(CHAT_MODEL, "Привет, группа.")
    assert await ask(tg, user, f"@{BOT} привет", **kw) == "Привет, группа."
    for text in ("/new@otherbot", "/memory@otherbot clear", "/start@otherbot x"):
        tg.push_text(user, text, **kw)
    assert await ask(tg, user, f"/help@{BOT}", **kw) == t("help", "ru")
    assert tg.texts_to(group) == ["Привет, группа.", t("help", "ru")]
    assert len(await stored(pool, group)) == 2
    record(record_property, "commands", commands=len(COMMANDS) + 8, internal_errors=0)


def reply_with_text(request: dict[str, Any]) -> str:
    """Answer "re: <the user's text>"; background models get an empty answer."""
    if request.get("model") == SIDE_MODEL:
        return "[]"
    return "re: " + message_text(request["messages"][-1]).rsplit("] ", 1)[-1]


@pytest.mark.parametrize("limit", [0, 20])
@pytest.mark.slow
async def test_a_burst_of_100_messages_from_one_user(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any, record_property: Any, limit: int
) -> None:
    """Without a limit every message is answered in order; with the default limit of 20 a
    minute, the first 20 are, and the rest get one clear sentence instead of silence."""
    user, burst = 8404 + limit, 100
    await start_bot(user_rate_limit=limit)
    llm.default_reply = reply_with_text
    texts = [f"burst {i}" for i in range(burst)]
    for text in texts:
        tg.push_text(user, text)
    accepted = burst if limit == 0 else limit
    answers = await tg.await_messages(user, accepted + (limit > 0), timeout=60)
    await asyncio.sleep(0.5)  # nothing more arrives
    got = tg.texts_to(user)
    rows = await stored(pool, user)
    assert [f"re: {text}" for text in texts[:accepted]] == [a for a in got if a.startswith("re:")]
    assert [role for role, _ in rows] == ["user", "assistant"] * accepted
    assert [unstamped(c) for role, c in rows if role == "user"] == texts[:accepted]
    if limit:
        assert got.count(t("rate_limited", "ru")) == 1
        assert len(got) == accepted + 1
    assert llm.max_concurrent == 1  # one user's turns never overlap
    record(
        record_property,
        f"burst of 100 (limit {limit or 'off'})",
        sent=burst,
        answered=len([a for a in got if a.startswith("re:")]),
        refused_with_notice=burst - accepted,
        stored=len(rows),
        lost=0,
        replies=len(answers),
    )


def record(record_property: Any, case: str, **figures: Any) -> None:
    """Keep a case's figures in the test report and the log."""
    for key, value in figures.items():
        record_property(key, value)
    logger.warning("%s: %s", case, figures)
