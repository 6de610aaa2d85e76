"""A group upgraded to a supergroup (issue 34, item 6): its memory, budget and model
move to the new chat id, and the reply Telegram refused for the old id goes to the new
one at once. The real Application against the fake Bot API, which answers a migrated
group as Telegram does (400 with `migrate_to_chat_id`)."""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import Any

from src.storage.erasure_repo import OWNER_COLUMNS, OWNER_TABLES
from tests.e2e.conftest import CHAT_MODEL, SIDE_MODEL, until
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.memory_model import memory_reply

ANN = 9801
BOT = "@tgagent_test_bot"


async def owner_rows(pool: Any, owner: int) -> dict[str, int]:
    """Return how many rows the owner has in each table with an owner column (and the
    chat's inbox and outbox rows)."""
    found: dict[str, int] = {}
    async with pool.connection() as conn:
        cur = await conn.execute(OWNER_TABLES, (list(OWNER_COLUMNS),))
        for row in await cur.fetchall():
            table, column = row["table_name"], row["column_name"]
            query = f'SELECT count(*) AS n FROM "{table}" WHERE "{column}" = %s'
            n = (await (await conn.execute(query, (owner,))).fetchone())["n"]
            if n and table != "turn_leases":
                found[table] = found.get(table, 0) + n
        for table in ("inbox", "outbox"):
            query = f"SELECT count(*) AS n FROM {table} WHERE chat_id = %s"
            n = (await (await conn.execute(query, (owner,))).fetchone())["n"]
            if n:
                found[table] = n
    return found


def saw(llm: Any, words: str) -> bool:
    """Tell whether the chat model's last request held `words` anywhere."""
    return words in str(llm.requests_for(CHAT_MODEL)[-1]["messages"])


async def test_a_reply_to_an_upgraded_group_moves_its_memory_and_goes_to_the_supergroup(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    old, new = -4_980_001, -1_004_980_001
    await start_bot()
    llm.script_for(CHAT_MODEL, "Noted.", "It is Zephyr.", "Still Zephyr.")
    tg.push_text(ANN, f"{BOT} the code word is Zephyr", chat_id=old, chat_type="group")
    await tg.await_messages(old, 1)
    before = await owner_rows(pool, old)
    assert {"users", "conversations", "messages", "llm_calls", "outbox"} <= set(before)
    # Someone turns the group into a supergroup while Ann's question is on its way.
    tg.migrate_group(old, new)
    tg.push_text(ANN, f"{BOT} what is the code word?", chat_id=old, chat_type="group")
    [reply] = await tg.await_messages(new, 1, timeout=20)
    assert reply["text"] == "It is Zephyr."
    assert tg.texts_to(old) == ["Noted."]
    assert await owner_rows(pool, old) == {}
    after = await owner_rows(pool, new)
    assert set(before) <= set(after) and after["messages"] == 4
    # The supergroup goes on with the group's memory.
    tg.push_text(ANN, f"{BOT} and now?", chat_id=new, chat_type="supergroup")
    await tg.await_messages(new, 2)
    assert saw(llm, "the code word is Zephyr")


async def test_the_upgrade_announced_in_both_chats_moves_the_memory_before_any_reply(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    old, new = -4_980_002, -1_004_980_002
    await start_bot()
    llm.script_for(CHAT_MODEL, "Noted.", "It is Zephyr.")
    tg.push_text(ANN, f"{BOT} the code word is Zephyr", chat_id=old, chat_type="group")
    await tg.await_messages(old, 1)
    tg.migrate_group(old, new, user_id=ANN, announce=True)
    moved: dict[str, int] = {}

    async def gone() -> bool:
        moved.update(await owner_rows(pool, new))
        return "messages" in moved and not await owner_rows(pool, old)

    await until_async(gone)
    tg.push_text(ANN, f"{BOT} what is the code word?", chat_id=new, chat_type="supergroup")
    [reply] = await tg.await_messages(new, 1)
    assert reply["text"] == "It is Zephyr." and saw(llm, "the code word is Zephyr")
    assert tg.texts_to(old) == ["Noted."]


async def until_async(condition: Any, timeout: float = 15.0) -> None:
    """Wait until the coroutine function `condition()` returns true."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_an_upgrade_during_a_group_turn_moves_the_memory_that_turn_writes(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    old, new = -4_980_003, -1_004_980_003
    bot = await start_bot(facts_every=1)
    answer = threading.Event()

    async def held(body: dict[str, Any]) -> Any:
        await asyncio.to_thread(answer.wait, 30)
        return "Teal, noted."

    async def slow_memory(body: dict[str, Any]) -> Any:
        # The turn's memory work (facts of "teal") is still under way when the group's
        # turn lock is given up to the move.
        if "teal" in str(body["messages"]):
            await asyncio.sleep(1.0)
        return memory_reply(body)

    llm.default_for(SIDE_MODEL, slow_memory)
    llm.script_for(CHAT_MODEL, "Noted.", held, "Zephyr and teal.")
    tg.push_text(ANN, f"{BOT} my code word is Zephyr", chat_id=old, chat_type="group")
    await tg.await_messages(old, 1)
    await until_async(lambda: has_fact(pool, old, "Zephyr"))
    tg.push_text(ANN, f"{BOT} my colour is teal", chat_id=old, chat_type="group")
    await until(lambda: len(llm.requests_for(CHAT_MODEL)) == 2)
    # The group becomes a supergroup while the model writes its answer: the bot has
    # taken both service messages (and a retry of one) before the answer comes.
    tg.migrate_group(old, new, user_id=ANN, announce=True)
    again = copy.deepcopy(tg.pushed[-1])
    del again["update_id"]
    tg.push_update(again)
    await until(lambda: not tg.updates)
    answer.set()
    [reply] = await tg.await_messages(new, 1, timeout=20)
    assert reply["text"] == "Teal, noted."
    # At once, while the turn's memory work still runs.
    tg.push_text(ANN, f"{BOT} what do you know?", chat_id=new, chat_type="supergroup")
    await tg.await_messages(new, 2)
    for said in ("my code word is Zephyr", "Noted.", "my colour is teal", "Teal, noted."):
        assert saw(llm, said), said
    assert saw(llm, ": teal")
    await bot.runtime.service.drain()
    assert await owner_rows(pool, old) == {}
    assert tg.texts_to(old) == ["Noted."]


async def has_fact(pool: Any, owner: int, value: str) -> bool:
    """Tell whether the owner has a current fact whose value is `value`."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT 1 FROM facts WHERE telegram_user_id = %s AND value = %s AND valid_to IS NULL",
            (owner, value),
        )
        return await cur.fetchone() is not None
