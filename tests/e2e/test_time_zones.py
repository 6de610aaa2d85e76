"""Each user's time zone (issue 35): /tz, the model's set_timezone, and the time stamps
the model sees, which carry the owner's zone and the time Telegram says a message was
sent. The real Application against the fake Bot API, the fake model, real PostgreSQL.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL, stored, until
from tests.fakes.bot_api_server import FakeBotAPI

ANN = 9901
BOB = 9902


def user_texts(llm: Any) -> list[str]:
    """Return the current (last) user message of every chat request, in order."""
    found = []
    for request in llm.requests_for(CHAT_MODEL):
        users = [m for m in request["messages"] if m["role"] == "user"]
        if users:
            content = users[-1]["content"]
            found.append(content if isinstance(content, str) else str(content))
    return found


async def test_tz_sets_the_zone_and_stamps_carry_it(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    bot = await start_bot()
    tg.push_text(ANN, "/tz", language_code="en")
    [shown] = await tg.await_messages(ANN, 1)
    assert shown["text"].startswith("No time zone chosen: I count time in Europe/Moscow")
    tg.push_text(ANN, "/tz Mars/Olympus", language_code="en")
    [*_, unknown] = await tg.await_messages(ANN, 2)
    assert unknown["text"] == t("tz_unknown", "en", zone="Mars/Olympus")
    budget = bot.runtime.service.usage.budget
    assert await budget.zone(ANN) is None  # kept: budget days in TIMEZONE
    tg.push_text(ANN, "/tz america/new york", language_code="en")
    [*_, done] = await tg.await_messages(ANN, 3)
    assert done["text"].startswith("Time zone: America/New_York, it is ")
    assert await budget.zone(ANN) == ZoneInfo("America/New_York")  # budget days follow
    llm.script_for(CHAT_MODEL, "ok")
    tg.push_text(ANN, "what time is it?", language_code="en")
    await tg.await_messages(ANN, 4)
    local = datetime.now(ZoneInfo("America/New_York"))
    [content] = [c for r, c in await stored(bot.runtime.pool, ANN) if r == "user"]
    # The label in the user's language, the time in their zone, the zone named.
    assert content.startswith(f"[Current time: {local:%Y-%m-%d} ")
    assert " America/New_York] what time is it?" in content
    assert user_texts(llm)[-1].endswith(content)
    # Another user keeps TIMEZONE, unnamed, and the Russian label.
    llm.script_for(CHAT_MODEL, "ok")
    tg.push_text(BOB, "привет")
    await tg.await_messages(BOB, 1)
    [bobs] = [c for r, c in await stored(bot.runtime.pool, BOB) if r == "user"]
    moscow = datetime.now(ZoneInfo("Europe/Moscow"))
    assert bobs.startswith(f"[Текущее время: {moscow:%Y-%m-%d} ") and bobs.endswith("] привет")
    assert "Europe" not in bobs
    tg.push_text(ANN, "/tz", language_code="en")
    [*_, again] = await tg.await_messages(ANN, 5)
    assert again["text"].startswith("Your time zone: America/New_York, it is ")


async def test_a_queued_message_is_stamped_with_its_telegram_date(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    """A message sent a minute before the bot handled it (it waited in the queue) is
    stamped with the minute Telegram says it was sent."""
    bot = await start_bot()
    await bot.runtime.deps.users.set_timezone(ANN, "Asia/Tokyo")
    sent = int(time.time()) - 90
    message = tg._message(ANN, language_code="en") | {"text": "hello from before", "date": sent}
    llm.script_for(CHAT_MODEL, "hi")
    tg.push_update({"message": message})
    await tg.await_messages(ANN, 1)
    [content] = [c for r, c in await stored(bot.runtime.pool, ANN) if r == "user"]
    local = datetime.fromtimestamp(sent, UTC).astimezone(ZoneInfo("Asia/Tokyo"))
    assert content == f"[Current time: {local:%Y-%m-%d %H:%M} Asia/Tokyo] hello from before"


async def test_the_model_sets_the_zone_of_the_current_owner_only(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    bot = await start_bot()
    assert await bot.runtime.service.usage.budget.zone(ANN) is None  # kept until it changes
    call = {"name": "set_timezone", "args": {"zone": "Europe/Berlin"}}
    llm.script_for(CHAT_MODEL, {"tool_calls": [call]}, "Noted, Berlin.")
    tg.push_text(ANN, "I moved to Berlin", language_code="en")
    [reply] = await tg.await_messages(ANN, 1)
    assert reply["text"] == "Noted, Berlin."
    assert ("system", "Tools used: set_timezone") in await stored(bot.runtime.pool, ANN)
    users = bot.runtime.deps.users
    assert (await users.get(ANN) or {})["timezone"] == "Europe/Berlin"
    assert await bot.runtime.service.usage.budget.zone(ANN) == ZoneInfo("Europe/Berlin")
    assert await users.get(BOB) is None
    llm.script_for(CHAT_MODEL, "ok")
    tg.push_text(ANN, "and now?", language_code="en")
    await tg.await_messages(ANN, 2)
    await until(lambda: len(user_texts(llm)) >= 2)
    assert " Europe/Berlin] and now?" in user_texts(llm)[-1]
