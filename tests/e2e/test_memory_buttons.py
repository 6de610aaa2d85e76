"""/memory's delete buttons and /memory forget in Telegram (issue 31): the real Application
against the fake Bot API, the fake model and real PostgreSQL."""

from __future__ import annotations

from typing import Any

from src.bot.memory_view import COMPACT, FACT, PAGE, parse_press
from src.services.texts import t
from tests.e2e.conftest import until
from tests.fakes.bot_api_server import FakeBotAPI

ANN = 9_320_001
BOB = 9_320_002
GROUP = -100_932_000


async def facts_of(bot: Any, owner: int) -> dict[str, str]:
    """Return the owner's fact rows, current and history, as {key: value}."""
    async with bot.runtime.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT key, value FROM facts WHERE telegram_user_id = %s ORDER BY id", (owner,)
        )
        return {r["key"]: r["value"] for r in await cur.fetchall()}


def buttons(tg: FakeBotAPI, chat: int, message_id: int) -> dict[str, str]:
    """Return the buttons under a bot message: {text: callback data}."""
    markup = tg.bot_message(chat, message_id)["reply_markup"]["inline_keyboard"]
    return {b["text"]: b["callback_data"] for row in markup for b in row}


async def answer_to(tg: FakeBotAPI, count: int) -> str | None:
    await until(lambda: len(tg.callback_answers) >= count)
    return tg.callback_answers[count - 1]["text"]


async def test_a_delete_button_forgets_a_fact_and_a_compact(start_bot: Any, tg: FakeBotAPI) -> None:
    bot = await start_bot()
    memory = bot.runtime.deps.memory
    for value in ("Berlin", "Paris"):
        await memory.upsert_fact(ANN, "city", value, "fact", 9)
    await memory.upsert_fact(ANN, "dog", "Rex", "fact", 5)
    await memory.add_compact(ANN, None, "Planned a trip.", ["travel"], "booked")
    tg.push_text(ANN, "/memory", language_code="en")
    [listing] = await tg.await_messages(ANN, 1)
    assert "1. city: Paris — was Berlin until " in listing["text"]
    assert "2. dog: Rex" in listing["text"] and "3. " in listing["text"]
    shown = buttons(tg, ANN, listing["message_id"])
    assert list(shown) == ["🗑 1", "🗑 2", "🗑 3"]
    tg.push_callback(ANN, ANN, listing["message_id"], shown["🗑 1"], language_code="en")
    assert await answer_to(tg, 1) == t("memory_forgot", "en", name="city")
    assert await facts_of(bot, ANN) == {"dog": "Rex"}  # Berlin went with Paris
    # The press is answered first, then the listing is edited: wait for the edit.
    await until(lambda: "city" not in tg.bot_message(ANN, listing["message_id"])["text"])
    assert "1. dog: Rex" in tg.bot_message(ANN, listing["message_id"])["text"]
    shown = buttons(tg, ANN, listing["message_id"])
    assert parse_press(shown["🗑 2"]).kind == COMPACT  # type: ignore[union-attr]
    tg.push_callback(ANN, ANN, listing["message_id"], shown["🗑 2"], language_code="en")
    assert await answer_to(tg, 2) == t("memory_compact_forgot", "en")
    assert await memory.list_compacts(ANN) == []
    # The page is shown again after the press is answered: counted before the next reply.
    await until(lambda: "Planned" not in tg.bot_message(ANN, listing["message_id"])["text"])
    # /memory forget KEY does the same with words.
    before = len(tg.messages_to(ANN))
    tg.push_text(ANN, "/memory forget Dog", language_code="en")
    reply = (await tg.await_messages(ANN, before + 1))[-1]["text"]
    assert reply == t("memory_forgot", "en", name="dog")
    assert await facts_of(bot, ANN) == {}


async def test_in_a_group_a_strangers_press_is_refused(start_bot: Any, tg: FakeBotAPI) -> None:
    bot = await start_bot()
    tg.set_chat_admins(GROUP, BOB)
    name = tg.bot_user["username"]
    await bot.runtime.deps.memory.upsert_fact(GROUP, "project", "Apollo", "fact", 7)
    kw: dict[str, Any] = {"chat_type": "supergroup", "chat_id": GROUP}
    tg.push_text(ANN, f"/memory@{name}", **kw)  # looking is anyone's
    listing = (await tg.await_messages(GROUP, 1))[-1]
    data = buttons(tg, GROUP, listing["message_id"])["🗑 1"]
    assert parse_press(data).kind == FACT  # type: ignore[union-attr]
    tg.push_callback(ANN, GROUP, listing["message_id"], data)
    assert await answer_to(tg, 1) == t("group_admins_only", "ru")
    assert await facts_of(bot, GROUP) == {"project": "Apollo"}
    assert "1. project: Apollo" in tg.bot_message(GROUP, listing["message_id"])["text"]
    before = len(tg.messages_to(GROUP))
    tg.push_text(ANN, f"/memory@{name} forget project", **kw)
    reply = (await tg.await_messages(GROUP, before + 1))[-1]["text"]
    assert reply == t("group_admins_only", "ru")
    assert await facts_of(bot, GROUP) == {"project": "Apollo"}
    # The group's administrator may.
    tg.push_callback(BOB, GROUP, listing["message_id"], data)
    assert await answer_to(tg, 2) == t("memory_forgot", "ru", name="project")
    assert await facts_of(bot, GROUP) == {}


async def test_pages_turn_past_the_first_hundred_facts(start_bot: Any, tg: FakeBotAPI) -> None:
    bot = await start_bot(max_facts=300)
    facts = [
        {"key": f"thing_{i:03d}", "value": "v" * 100, "type": "fact", "importance": 5}
        for i in range(120)
    ]
    await bot.runtime.deps.memory.upsert_facts(ANN, facts)
    tg.push_text(ANN, "/memory", language_code="en")
    [listing] = await tg.await_messages(ANN, 1)
    seen: set[str] = set()
    for count in range(1, 40):
        text = tg.bot_message(ANN, listing["message_id"])["text"]
        new = {line.split(": ")[0].split(". ")[1] for line in text.splitlines() if "thing_" in line}
        if new <= seen:
            break
        seen |= new
        turn = buttons(tg, ANN, listing["message_id"])["▶"]
        assert parse_press(turn).kind == PAGE  # type: ignore[union-attr]
        tg.push_callback(ANN, ANN, listing["message_id"], turn, language_code="en")
        await answer_to(tg, count)
        # The press is answered first, then the page is shown (the last page again is
        # "not modified", but asked for all the same).
        await until(lambda: len(tg.calls_of("editMessageText")) >= count)  # noqa: B023
    assert seen == {f["key"] for f in facts}


async def test_a_forwarded_text_is_stored_as_someone_elses_words(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    """A preference asked for from a forwarded text is not the user's say: the message is
    stored as a forward, and remember_fact keeps what it asked for as a hypothesis."""
    bot = await start_bot()
    chat_model = bot.runtime.settings.llm_model
    remember = {"name": "remember_fact", "args": {"key": "tea", "value": "oolong"}}
    remember["args"]["type"] = "preference"
    llm.script_for(chat_model, {"tool_calls": [remember]}, "Noted.")
    message = tg._message(ANN, language_code="en") | {"text": "I always drink oolong"}
    message["forward_origin"] = {
        "type": "user",
        "date": 1_700_000_000,
        "sender_user": {"id": BOB, "is_bot": False, "first_name": "Bob"},
    }
    tg.push_update({"message": message})
    await tg.await_messages(ANN, 1)
    conversation = await bot.runtime.deps.conversations.get_or_create_conversation(ANN)
    rows = await bot.runtime.deps.conversations.load_last_messages(conversation, 10)
    stored = [r for r in rows if r["role"] == "user"]
    assert stored and stored[0]["meta"] == {"media": ["forward"]}
    await until(lambda: bool(llm.requests_for(chat_model)))
    facts = await bot.runtime.deps.memory.list_facts(ANN)
    assert [(f["key"], f["type"]) for f in facts] == [("tea", "hypothesis")]
