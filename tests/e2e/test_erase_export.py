"""/export and /erase in Telegram (issue 31): the real Application polling the fake Bot
API, the fake model and real PostgreSQL. /export sends a JSON file (and its Markdown
twin) holding every stored message; a bare /erase only asks, with a button; its press,
or `/erase yes`, erases, and then no table of the database holds what the user wrote.
"""

from __future__ import annotations

import json
from typing import Any

from src.bot.data_commands import ERASE_DATA
from src.bot.state import state_of
from src.services.texts import t
from tests.db_scan import traces
from tests.e2e.conftest import CHAT_MODEL, SIDE_MODEL, stored, until
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.memory_model import memory_reply

ANN = 9_330_001
BOB = 9_330_002
MARK = "qwzmarker2718"


async def say(tg: FakeBotAPI, user: int, text: str) -> dict[str, Any]:
    """Send a text as the user and return the bot's next message."""
    before = len(tg.messages_to(user))
    tg.push_text(user, text, language_code="en")
    return (await tg.await_messages(user, before + 1, timeout=20))[-1]


async def documents(tg: FakeBotAPI, user: int, count: int) -> list[dict[str, Any]]:
    """Wait for `count` documents sent to the user; return their uploads."""
    await until(lambda: len([c for c in tg.calls_of("sendDocument")]) >= count, 20)
    calls = [c for c in tg.calls_of("sendDocument") if c["params"]["chat_id"] == user]
    return [c["params"]["document"] for c in calls]


async def test_export_then_erase_with_the_button(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    llm.default_for(SIDE_MODEL, memory_reply)  # facts, as a memory model finds them
    bot = await start_bot(facts_every=1)
    llm.script_for(CHAT_MODEL, "Noted.", "Sure.")
    assert (await say(tg, ANN, f"my code is {MARK}"))["text"] == "Noted."
    assert (await say(tg, ANN, f"repeat {MARK}"))["text"] == "Sure."
    await bot.runtime.service.drain()

    tg.push_text(ANN, "/export", language_code="en")
    files = await documents(tg, ANN, 2)
    assert [f["filename"].rsplit(".", 1)[1] for f in files] == ["json", "md"]
    data = json.loads(files[0]["data"])
    exported = [m["content"] for c in data["conversations"] for m in c["messages"]]
    rows = await stored(pool, ANN)
    assert len(rows) == 4 and exported == [content for _, content in rows]
    assert any(f["value"] == MARK for f in data["facts"])
    assert MARK in files[1]["data"].decode()

    # A bare /erase deletes nothing: it asks, with a button.
    question = await say(tg, ANN, "/erase")
    assert question["text"] == t("erase_confirm", "en")
    markup = tg.bot_message(ANN, question["message_id"])["reply_markup"]  # type: ignore[index]
    assert markup["inline_keyboard"][0][0]["callback_data"] == ERASE_DATA
    assert len(await stored(pool, ANN)) == 4
    found = set(await traces(pool, MARK))
    assert {"inbox.payload", "messages.content", "facts.value"} <= found
    assert {"checkpoint_blobs.blob", "checkpoint_writes.blob"} & found

    tg.push_callback(ANN, ANN, question["message_id"], ERASE_DATA, language_code="en")
    await until(lambda: "Done" in tg.bot_message(ANN, question["message_id"])["text"], 20)  # type: ignore[index]
    sentence = tg.bot_message(ANN, question["message_id"])["text"]  # type: ignore[index]
    assert sentence == t("erased", "en", messages=4, facts=1, compacts=0)
    assert await stored(pool, ANN) == []
    assert await traces(pool, MARK) == []
    # The bot goes on, from a clean slate.
    llm.script_for(CHAT_MODEL, "Hello!")
    assert (await say(tg, ANN, "hi"))["text"] == "Hello!"


async def test_erase_yes_erases_at_once(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    bot = await start_bot()
    llm.script_for(CHAT_MODEL, f"Noted: {MARK}.")
    assert (await say(tg, BOB, f"keep {MARK} for me"))["text"] == f"Noted: {MARK}."
    assert {"inbox.payload", "outbox.text"} <= set(await traces(pool, MARK))
    answer = await say(tg, BOB, "/erase yes")
    assert answer["text"] == t("erased", "en", messages=2, facts=0, compacts=0)
    assert await stored(pool, BOB) == []
    assert await traces(pool, MARK) == []
    # The chat's updates are deleted, not blanked; Telegram sending them again (a
    # redelivery after a crash) stores and answers nothing.
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM inbox WHERE chat_id = %s", (BOB,))
        assert (await cur.fetchone())["n"] == 0
    sent = [u for u in tg.pushed if u["message"]["chat"]["id"] == BOB]
    assert len(sent) == 2
    assert await state_of(bot.app).receiver.accept(sent) == 0
    assert await stored(pool, BOB) == []
    assert len(tg.messages_to(BOB)) == 2
