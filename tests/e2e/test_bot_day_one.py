"""What a Telegram user meets on day one (issue 34, items 11 to 13): voice notes any
endpoint takes, replies that carry the message they answer, screenshots sent as files,
texts in the user's language and command menus that fit the chat.

The real Application against the fake Bot API, the fake model and real PostgreSQL.
"""

from __future__ import annotations

from typing import Any

from src.services.texts import t
from tests.fakes.bot_api_server import FakeBotAPI

ANN, BEN, OLES = 3401, 3402, 3403
GROUP = -100_340_000


async def test_users_of_languages_other_than_russian_get_english(
    start_bot: Any, tg: FakeBotAPI
) -> None:
    await start_bot()
    for n, code in enumerate(("uk", "be", "kk", "de")):
        tg.push_text(OLES + n, "/help", language_code=code)
        [answer] = await tg.await_messages(OLES + n, 1)
        assert answer["text"] == t("help", "en"), code
    tg.push_text(ANN, "/help", language_code="ru")
    assert (await tg.await_messages(ANN, 1))[0]["text"] == t("help", "ru")


async def test_command_menus_fit_the_chat_and_who_asks(start_bot: Any, tg: FakeBotAPI) -> None:
    tg.push_text(ANN, "hi", chat_type="supergroup", chat_id=GROUP)  # the fake knows the group
    tg.set_chat_admins(GROUP, BEN)
    await start_bot()
    private = tg.menu(ANN, ANN, "en")
    assert {"new", "forget", "mute", "erase", "export"} <= set(private)
    assert private["help"] == t("cmd_help", "en")
    assert tg.menu(ANN, ANN, "ru")["help"] == t("cmd_help", "ru")
    assert tg.menu(OLES, OLES, "uk")["help"] == t("cmd_help", "en")
    member = tg.menu(GROUP, ANN, "en")
    assert {"help", "memory", "stop", "usage"} <= set(member)
    # What only a group's administrators may do is not offered to its members.
    assert not {"new", "forget", "compress", "model", "export", "erase", "mute"} & set(member)
    admin = tg.menu(GROUP, BEN, "ru")
    assert {"new", "forget", "compress", "model", "export", "erase"} <= set(admin)
    assert admin["new"] == t("cmd_new", "ru") and "mute" not in admin
