"""The bot's language, one rule (issue 41): a Russian code gets Russian, any other code
English, no code DEFAULT_LANGUAGE (Russian unless set); and `/tz` in a group speaks of the
group's time zone. The real Application against the fake Bot API and real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from src.graph.lang import lang_of, set_default_language
from src.services.texts import t
from tests.conftest import make_settings
from tests.e2e.test_bot_e2e import say
from tests.fakes.bot_api_server import FakeBotAPI

GROUP = -100_8520


@pytest.fixture(autouse=True)
def default_language_back() -> Iterator[None]:
    """DEFAULT_LANGUAGE is the process's once a runtime is built: set it back after."""
    yield
    set_default_language("ru")


@pytest.mark.parametrize("default", ["ru", "en"])
async def test_a_user_without_a_language_code_gets_the_default_language(
    start_bot: Any, tg: FakeBotAPI, default: str
) -> None:
    await start_bot(default_language=default)
    greeting = await say(tg, 8501, "/start", first_name="Ann", language_code=None)
    assert greeting == t("greeting", default, name="Ann")
    assert t("greeting", None, name="Ann") == greeting
    # A code decides whatever the default: Russian for ru, English for any other.
    assert await say(tg, 8502, "/start", first_name="Bo", language_code="ru-RU") == t(
        "greeting", "ru", name="Bo"
    )
    for other in ("uk", "be", "en-GB", "de"):
        assert lang_of(other) == "en"
        answer = await say(tg, 8503, "/start", first_name="Cy", language_code=other)
        assert answer == t("greeting", "en", name="Cy")


def test_a_default_language_other_than_ru_or_en_stops_the_start() -> None:
    with pytest.raises(ValueError, match="default_language"):
        make_settings(default_language="de")


async def test_tz_in_a_group_speaks_of_the_groups_zone(start_bot: Any, tg: FakeBotAPI) -> None:
    await start_bot()
    kw: dict[str, Any] = {"chat_id": GROUP, "chat_type": "supergroup", "language_code": "en"}
    tg.set_chat_admins(GROUP, 8511)
    shown = await say(tg, 8512, "/tz", **kw)
    assert shown.startswith("The group has no time zone chosen: I count time in Europe/Moscow")
    set_zone = await say(tg, 8511, "/tz Asia/Tokyo", **kw)
    assert set_zone.startswith("Time zone: Asia/Tokyo")
    shown = await say(tg, 8512, "/tz", **kw)
    assert shown.startswith("The group's time zone: Asia/Tokyo, it is ")
    russian = await say(tg, 8512, "/tz", **kw | {"language_code": "ru"})
    assert russian.startswith("Часовой пояс группы: Asia/Tokyo")
    # In a private chat it is the user's own.
    private = await say(tg, 8512, "/tz", language_code="en")
    assert private.startswith("No time zone chosen")
