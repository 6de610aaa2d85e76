"""Handlers driven with real Updates through the real Application, with no network at all.

The Bot's request class (tests/fakes/offline_bot.py) answers getMe, sendMessage,
sendChatAction and getChatMember from memory and raises NetworkError for anything else;
the `bot` and `factory` fixtures are in tests/unit/conftest.py. No runtime (and no
database) is started, so a handler that reached AgentService would fail loudly — which the
error handler turns into "something went wrong", and that is tested too.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

import pytest

from src.bot.app import file_base_url
from src.cli.bot import run_bot
from src.services.texts import t
from tests.conftest import make_settings
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.offline_bot import feed


async def test_start_help_and_unknown_command(bot: Any, factory: FakeBotAPI) -> None:
    app, offline = bot
    factory.push_text(1, "/start", first_name="Ann")
    await feed(app, factory)
    factory.push_text(1, "/help", language_code="en")
    await feed(app, factory)
    factory.push_text(1, "/nope")
    await feed(app, factory)
    assert offline.texts() == [
        t("greeting", "ru", name="Ann"),
        t("help", "en"),
        t("unknown_command", "ru"),
    ]


async def test_what_cannot_be_read_gets_a_clear_answer(bot: Any, factory: FakeBotAPI) -> None:
    # Voice notes, photos and documents are read (tests/e2e/test_media.py); the rest is not.
    app, offline = bot
    factory.push_sticker(1)
    await feed(app, factory)
    location = {"location": {"latitude": 55.75, "longitude": 37.62}}
    factory.push_update({"message": factory._message(1) | location})
    await feed(app, factory)
    factory.push_update({"message": factory._message(1, language_code="en") | location})
    await feed(app, factory)
    assert offline.texts() == [t("not_text", "ru")] * 2 + [t("not_text", "en")]


async def test_edits_channel_posts_and_group_chatter_are_silent(
    bot: Any, factory: FakeBotAPI
) -> None:
    app, offline = bot
    factory.push_text(1, "hello")  # not fed: only there to be edited
    factory.push_edited_text(1, "hello again")
    await feed(app, factory)
    factory.push_channel_post(-100777, "news")
    await feed(app, factory)
    factory.push_text(1, "talking among ourselves", chat_type="supergroup", chat_id=-1002)
    await feed(app, factory)
    factory.push_sticker(1, chat_type="group", chat_id=-1003)
    await feed(app, factory)
    factory.push_text(1, "/help@another_bot", chat_type="group", chat_id=-1003)
    await feed(app, factory)
    factory.push_update(
        {"message": factory._message(1) | {"new_chat_title": "renamed"}}  # a service message
    )
    await feed(app, factory)
    assert offline.calls == [("getMe", {})]


async def test_group_mention_and_commands_are_answered(bot: Any, factory: FakeBotAPI) -> None:
    app, offline = bot
    factory.push_text(1, "/help@tgagent_test_bot", chat_type="group", chat_id=-7)
    await feed(app, factory)
    factory.push_sticker(1, chat_type="group", chat_id=-7, reply_to_bot=True)
    await feed(app, factory)
    assert offline.texts() == [t("help", "ru"), t("not_text", "ru")]
    sent = [p for name, p in offline.calls if name == "sendMessage"]
    assert all(p["chat_id"] == -7 and "reply_parameters" in p for p in sent)


@pytest.mark.parametrize("bot", [{"allowed_user_ids": [1], "admin_user_ids": [2]}], indirect=True)
async def test_refused_users_get_one_polite_sentence(bot: Any, factory: FakeBotAPI) -> None:
    app, offline = bot
    factory.push_text(3, "hello", language_code="en")
    await feed(app, factory)
    factory.push_text(3, "/start")
    await feed(app, factory)
    factory.push_text(3, "chatter", chat_type="group", chat_id=-9)  # not addressed: silence
    await feed(app, factory)
    factory.push_text(2, "/help")  # an admin is always allowed
    await feed(app, factory)
    assert offline.texts() == [t("not_allowed", "en"), t("not_allowed", "ru"), t("help", "ru")]


@pytest.mark.parametrize(
    "bot", [{"user_rate_limit": 2, "allowed_user_ids": [1], "admin_user_ids": [5]}], indirect=True
)
async def test_rate_limit_explains_once(bot: Any, factory: FakeBotAPI) -> None:
    app, offline = bot
    for _ in range(5):
        factory.push_text(1, "/help")
        await feed(app, factory)
    assert offline.texts() == [t("help", "ru")] * 2 + [t("rate_limited", "ru")]
    for _ in range(4):  # admins are not limited
        factory.push_text(5, "/help")
        await feed(app, factory)
    assert offline.texts()[3:] == [t("help", "ru")] * 4


@pytest.mark.parametrize("bot", [{"user_rate_limit": 1, "allowed_user_ids": [1]}], indirect=True)
async def test_strangers_hear_not_allowed_never_rate_limited(bot: Any, factory: FakeBotAPI) -> None:
    app, offline = bot
    for _ in range(3):
        factory.push_text(3, "/help")
        await feed(app, factory)
    factory.push_text(1, "/help")  # strangers spent none of an allowed user's window
    await feed(app, factory)
    assert offline.texts() == [t("not_allowed", "ru")] * 3 + [t("help", "ru")]


@pytest.mark.parametrize("bot", [{"admin_user_ids": [2]}], indirect=True)
async def test_admins_alone_close_the_bot(bot: Any, factory: FakeBotAPI) -> None:
    app, offline = bot
    factory.push_text(3, "/help")
    await feed(app, factory)
    factory.push_text(3, "/help@tgagent_test_bot", chat_type="group", chat_id=-9)
    await feed(app, factory)
    factory.push_text(2, "/help")
    await feed(app, factory)
    assert offline.texts() == [t("not_allowed", "ru")] * 2 + [t("help", "ru")]


async def test_mute_in_a_group_says_groups_are_never_reminded(
    bot: Any, factory: FakeBotAPI
) -> None:
    app, offline = bot
    factory.push_text(1, "/mute", chat_type="group", chat_id=-7, language_code="en")
    await feed(app, factory)  # no runtime: answered without touching the service
    assert offline.texts() == [t("mute_group", "en")]


def test_mute_answers_say_the_new_state_and_the_way_back() -> None:
    for lang in ("ru", "en"):
        off, on = t("muted", lang), t("unmuted", lang)
        assert off != on and "/mute" in off and "/mute" in on
        assert t("memory_reminders_off", lang).split()[0] in off  # "Напоминания"/"Reminders"


async def test_errors_are_logged_and_the_user_told(
    bot: Any, factory: FakeBotAPI, caplog: pytest.LogCaptureFixture
) -> None:
    app, offline = bot
    factory.push_text(1, "hello")  # no runtime was started: the turn cannot run
    with caplog.at_level(logging.ERROR, logger="src.bot.handlers"):
        await feed(app, factory)
    assert offline.texts() == [t("internal_error", "ru")]
    records = [r for r in caplog.records if r.name == "src.bot.handlers"]
    assert len(records) == 1 and records[0].exc_info is not None
    assert "runtime is not started" in str(records[0].exc_info[1])


def test_file_url_is_derived_from_the_base_url() -> None:
    assert file_base_url("http://127.0.0.1:8081/bot") == "http://127.0.0.1:8081/file/bot"
    assert file_base_url("https://api.telegram.org/bot/") == "https://api.telegram.org/file/bot"


async def test_missing_token_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = await run_bot(argparse.Namespace(), make_settings(None))
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "TELEGRAM_BOT_TOKEN" in err and "BotFather" in err
