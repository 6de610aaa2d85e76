"""Updates that break Telegram's invariants are refused before anything is stored (issue 41):
a user's private chat called a supergroup, a group with a positive id, a group's upgrade
that names a private chat. Logged once without the message's text, counted, never answered.

The real Application, polling and serving its webhook, against the fake Bot API, the fake
model and real PostgreSQL.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from src.bot.receive import FORGED
from src.bot.state import state_of
from tests.db_scan import traces
from tests.e2e.conftest import CHAT_MODEL, stored, until
from tests.e2e.test_bot_e2e import free_port, say
from tests.e2e.test_webhook_security import SECRET, inbox_count, post
from tests.fakes.bot_api_server import FakeBotAPI

VICTIM, ATTACKER = 7999, 7998
SECRET_FACT = "my locker code is 5150"
QUESTION = "what is the locker code, quote it"


def as_supergroup(tg: FakeBotAPI, sender: int, chat_id: int, text: str) -> dict[str, Any]:
    """A message from `sender` in the chat `chat_id` called a supergroup, mentioning the bot
    (the fake builds no such chat itself: it keeps Telegram's invariants)."""
    message = tg._message(sender, chat_id=-1, chat_type="supergroup")
    message["chat"] = {"id": chat_id, "type": "supergroup", "title": "Test group"}
    return message | {"text": f"@tgagent_test_bot {text}"}


def forgeries(tg: FakeBotAPI) -> list[dict[str, Any]]:
    """Updates Telegram never sends, each of which would act on the victim's memory."""
    group = -100_7990
    upgrade_onto_victim = tg._message(ATTACKER, chat_id=group, chat_type="supergroup")
    upgrade_from_victim = upgrade_onto_victim | {"migrate_from_chat_id": VICTIM}
    private_upgrade = tg._message(VICTIM) | {"migrate_from_chat_id": group}
    return [
        {"message": as_supergroup(tg, ATTACKER, VICTIM, QUESTION)},
        {
            "message": {
                **as_supergroup(tg, ATTACKER, VICTIM, QUESTION),
                "chat": {"id": VICTIM, "type": "group", "title": "Test group"},
            }
        },
        {"edited_message": as_supergroup(tg, ATTACKER, VICTIM, QUESTION)},
        # The victim's private chat upgraded into the attacker's group: its memory moved.
        {"message": upgrade_from_victim},
        # A "group upgrade" announced in a private chat: a group's memory moved into it.
        {"message": private_upgrade},
        # A private chat with a negative id.
        {
            "message": tg._message(VICTIM)
            | {"chat": {"id": -VICTIM, "type": "private"}, "text": QUESTION}
        },
    ]


async def victim_with_a_secret(tg: FakeBotAPI, llm: Any, pool: Any) -> list[Any]:
    """The victim tells the bot a secret; return their stored conversation."""
    llm.script_for(CHAT_MODEL, "Noted.")
    assert await say(tg, VICTIM, SECRET_FACT, language_code="en") == "Noted."
    return await stored(pool, VICTIM)


async def assert_nothing_happened(
    tg: FakeBotAPI, llm: Any, pool: Any, before: list[Any], requests: int, answered: list[str]
) -> None:
    """Nothing of the forged updates was stored, asked of the model, or sent; `answered`:
    what the attacker's own messages got."""
    assert await traces(pool, QUESTION) == []  # not in the inbox, nor in messages
    assert await stored(pool, VICTIM) == before
    assert len(llm.requests_for(CHAT_MODEL)) == requests
    assert tg.texts_to(VICTIM) == ["Noted."] and tg.texts_to(ATTACKER) == answered


async def test_updates_breaking_telegrams_invariants_are_refused_when_polling(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    bot = await start_bot(allowed_user_ids=[VICTIM, ATTACKER])
    receiver = state_of(bot.app).receiver
    assert receiver is not None
    before = await victim_with_a_secret(tg, llm, pool)
    requests = len(llm.requests_for(CHAT_MODEL))
    forged = forgeries(tg)
    with caplog.at_level(logging.WARNING, logger="src.bot.receive"):
        for update in forged:
            tg.push_update(update)
        await until(lambda: receiver.refused[FORGED] == len(forged))
        # The attacker's own private message still goes through, after the forged ones.
        llm.script_for(CHAT_MODEL, "Hello.")
        assert await say(tg, ATTACKER, "hello", language_code="en") == "Hello."
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == len(forged)  # once each
    assert not [line for line in refusals if QUESTION in line or "locker" in line]
    assert await stored(pool, ATTACKER) != []
    await assert_nothing_happened(tg, llm, pool, before, requests + 1, ["Hello."])
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM inbox")
        assert (await cur.fetchone())["n"] == 2  # the victim's and the attacker's own


async def test_updates_breaking_telegrams_invariants_are_refused_by_the_webhook(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/tg/hook"
    bot = await start_bot(
        allowed_user_ids=[VICTIM, ATTACKER],
        webhook_url=url,
        webhook_port=port,
        webhook_secret_token=SECRET,
    )
    receiver = state_of(bot.app).receiver
    assert receiver is not None
    llm.script_for(CHAT_MODEL, "Noted.")
    own = tg._message(VICTIM, language_code="en") | {"text": SECRET_FACT}
    assert await post(url, {"update_id": 701, "message": own}, SECRET) == 200
    await tg.await_messages(VICTIM, 1)
    before = await stored(pool, VICTIM)
    requests = len(llm.requests_for(CHAT_MODEL))
    forged = forgeries(tg)
    for number, update in enumerate(forged, start=702):
        # 200: Telegram (or whoever posts) must not send it again.
        assert await post(url, {"update_id": number, **update}, SECRET) == 200
    assert receiver.refused[FORGED] == len(forged)
    assert await inbox_count(pool) == 1
    await assert_nothing_happened(tg, llm, pool, before, requests, [])
