"""The fake Bot API's getChatMember answers as Telegram does, through a real PTB Bot."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
import telegram
from telegram.constants import ChatMemberStatus
from telegram.error import BadRequest

from tests.fakes.bot_api_server import FakeBotAPI

TOKEN = "123456:TEST-TOKEN"
GROUP = -100_500


def make_bot(tg: FakeBotAPI) -> telegram.Bot:
    return telegram.Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url)


async def test_statuses_of_a_group(tg: FakeBotAPI) -> None:
    tg.push_text(1, "hi", chat_type="supergroup", chat_id=GROUP, first_name="Ann")
    tg.push_text(2, "hi", chat_type="supergroup", chat_id=GROUP)
    tg.push_text(3, "hi")  # known to Telegram, never in the group
    tg.set_chat_admins(GROUP, 2, creator=4)
    async with make_bot(tg) as bot:
        ann = await bot.get_chat_member(GROUP, 1)
        assert isinstance(ann, telegram.ChatMemberMember) and ann.user.first_name == "Ann"
        admin = await bot.get_chat_member(GROUP, 2)
        assert isinstance(admin, telegram.ChatMemberAdministrator)
        assert admin.status == ChatMemberStatus.ADMINISTRATOR and admin.can_manage_chat
        owner = await bot.get_chat_member(GROUP, 4)
        assert isinstance(owner, telegram.ChatMemberOwner) and owner.status == "creator"
        assert (await bot.get_chat_member(GROUP, 3)).status == ChatMemberStatus.LEFT
        assert (await bot.get_chat_member(GROUP, 999)).status == ChatMemberStatus.MEMBER  # the bot
        tg.set_member(GROUP, 1, "kicked")
        assert isinstance(await bot.get_chat_member(GROUP, 1), telegram.ChatMemberBanned)
        tg.set_member(GROUP, 1, "restricted")
        assert isinstance(await bot.get_chat_member(GROUP, 1), telegram.ChatMemberRestricted)
        assert (await bot.get_chat_member(3, 3)).status == ChatMemberStatus.MEMBER  # private


async def test_unknown_chats_and_users_are_bad_requests(tg: FakeBotAPI) -> None:
    tg.push_text(1, "hi", chat_type="group", chat_id=GROUP)
    async with make_bot(tg) as bot:
        with pytest.raises(BadRequest, match="Chat not found"):
            await bot.get_chat_member(-100_999, 1)
        with pytest.raises(BadRequest, match="User not found"):
            await bot.get_chat_member(GROUP, 424242)
        with pytest.raises(BadRequest, match="(?i)invalid user_id"):
            await bot.get_chat_member(GROUP, 0)
    with pytest.raises(ValueError, match="status"):
        tg.set_member(GROUP, 1, "moderator")
    tg.set_chat_admins(GROUP, 5)
    tg.reset()  # forgets who was made an administrator; writers stay members
    assert tg.chat_member({"chat_id": GROUP, "user_id": 5})[1]["result"]["status"] == "left"
    assert tg.chat_member({"chat_id": GROUP, "user_id": 1})[1]["result"]["status"] == "member"


def test_missing_parameters_over_raw_http(tg: FakeBotAPI) -> None:
    tg.push_text(1, "hi", chat_type="group", chat_id=GROUP)

    def call(params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            f"{tg.base_url}{TOKEN}/getChatMember",
            data=json.dumps(params).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    assert call({"user_id": 1}) == (
        400,
        {"ok": False, "error_code": 400, "description": "Bad Request: chat_id is empty"},
    )
    assert call({"chat_id": GROUP, "user_id": "x"})[1]["description"] == (
        "Bad Request: invalid user_id specified"
    )
    status, body = call({"chat_id": GROUP, "user_id": 1})
    assert status == 200 and body["result"] == {
        "status": "member",
        "user": {"id": 1, "is_bot": False, "first_name": "Test", "username": "test_user"}
        | {"language_code": "ru"},
    }
