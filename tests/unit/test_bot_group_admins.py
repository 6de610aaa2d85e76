"""In groups, /new, /forget and /compress are for the group's administrators; a member's
/memory clear clears their own facts (an administrator's, the group's).

Driven with real Updates through the real Application and no runtime: a command that got
past the check would reach AgentService and fail loudly ("something went wrong"), which is
how these tests see that it was let through.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from src.bot.access import GroupAdmins
from src.bot.state import state_of
from src.services.texts import t
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.offline_bot import feed

GROUP = -100_321
MEMORY_COMMANDS = ["/new", "/forget", "/memory clear", "/compress", "/memory очистить"]
ADMINS_ONLY = ["/new", "/forget", "/compress"]
REFUSED = t("group_admins_only", "ru")
LET_THROUGH = t("internal_error", "ru")  # reached the service, which is not started


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def in_group(**kw: Any) -> dict[str, Any]:
    return {"chat_type": "supergroup", "chat_id": GROUP} | kw


def member_calls(offline: Any) -> list[dict[str, Any]]:
    return [params for name, params in offline.calls if name == "getChatMember"]


@pytest.mark.parametrize("command", ADMINS_ONLY)
async def test_a_member_is_refused_in_one_sentence(
    bot: Any, factory: FakeBotAPI, command: str
) -> None:
    app, offline = bot
    factory.push_text(1, command, **in_group())
    await feed(app, factory)
    factory.push_text(
        1, command.replace(" ", "@tgagent_test_bot ", 1), **in_group(language_code="en")
    )
    await feed(app, factory)
    assert offline.texts() == [REFUSED, t("group_admins_only", "en")]
    assert member_calls(offline)[0] == {"chat_id": GROUP, "user_id": 1}


@pytest.mark.parametrize("command", ["/memory clear", "/memory очистить"])
async def test_a_members_memory_clear_goes_to_their_own_facts(
    bot: Any, factory: FakeBotAPI, command: str
) -> None:
    app, offline = bot
    factory.push_text(1, command, **in_group())
    await feed(app, factory)
    assert offline.texts() == [LET_THROUGH]  # not refused: it clears the member's own


@pytest.mark.parametrize("command", MEMORY_COMMANDS)
async def test_administrators_and_the_creator_pass(
    bot: Any, factory: FakeBotAPI, command: str
) -> None:
    app, offline = bot
    factory.set_chat_admins(GROUP, 2, creator=3)
    for user in (2, 3):
        factory.push_text(user, command, **in_group())
        await feed(app, factory)
    assert offline.texts() == [LET_THROUGH, LET_THROUGH]


async def test_private_chats_and_other_commands_are_unchanged(
    bot: Any, factory: FakeBotAPI
) -> None:
    app, offline = bot
    for command in ("/new", "/forget", "/memory clear", "/compress"):
        factory.push_text(1, command)
        await feed(app, factory)
    factory.push_text(1, "/help", **in_group())
    await feed(app, factory)
    factory.push_text(1, "/memory", **in_group())  # looking is not changing
    await feed(app, factory)
    assert offline.texts() == [LET_THROUGH] * 4 + [t("help", "ru"), LET_THROUGH]
    assert member_calls(offline) == []


async def test_an_anonymous_administrator_passes_without_asking(
    bot: Any, factory: FakeBotAPI
) -> None:
    app, offline = bot
    factory.push_text(
        1087968824, "/new", **in_group(first_name="Group", username="GroupAnonymousBot")
    )
    update = factory.updates[-1]
    update["message"]["from"]["is_bot"] = True
    update["message"]["sender_chat"] = update["message"]["chat"]
    await feed(app, factory)
    assert offline.texts() == [LET_THROUGH] and member_calls(offline) == []


async def test_the_answer_is_kept_for_a_minute(bot: Any, factory: FakeBotAPI) -> None:
    app, offline = bot
    clock = Clock()
    state_of(app).group_admins = GroupAdmins(clock=clock)
    factory.push_text(1, "/new", **in_group())
    await feed(app, factory)
    factory.set_chat_admins(GROUP, 1)  # promoted meanwhile
    clock.now += 59
    factory.push_text(1, "/new", **in_group())
    await feed(app, factory)
    assert offline.texts() == [REFUSED, REFUSED] and len(member_calls(offline)) == 1
    clock.now += 2
    factory.push_text(1, "/new", **in_group())
    await feed(app, factory)
    assert offline.texts()[-1] == LET_THROUGH and len(member_calls(offline)) == 2


async def test_telegram_not_knowing_the_chat_means_no(
    bot: Any, factory: FakeBotAPI, caplog: pytest.LogCaptureFixture
) -> None:
    app, offline = bot
    factory.push_text(1, "/new", **in_group())
    stranger = {"id": -100_404, "type": "supergroup", "title": "Never seen"}
    factory.push_update({"message": factory.updates[-1]["message"] | {"chat": stranger}})
    with caplog.at_level(logging.INFO, logger="src.bot.access"):
        await feed(app, factory)
    assert offline.texts() == [REFUSED]
    assert any("chat not found" in r.getMessage().lower() for r in caplog.records)
