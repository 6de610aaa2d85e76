"""The inbox and the outbox in one process: redeliveries, refusals, resends, Bot API faults.

The real Application against the fake Bot API, the fake model and real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

from psycopg_pool import PoolTimeout

from src.bot.formatting import split_message
from src.bot.queue import QUEUE, TASK
from src.bot.state import state_of
from src.services.texts import t
from src.storage.delivery_repo import Delivery
from tests.e2e.conftest import CHAT_MODEL, stored
from tests.fakes.bot_api_server import FakeBotAPI

ANN = 9101


async def rows(pool: Any, sql: str, *params: Any) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        return list(await (await conn.execute(sql, params)).fetchall())


async def settled(pool: Any, timeout: float = 15.0) -> None:
    """Wait until every stored update is processed."""
    deadline = time.monotonic() + timeout
    while await rows(pool, "SELECT 1 FROM inbox WHERE done_at IS NULL"):
        assert time.monotonic() < deadline, "updates left unprocessed"
        await asyncio.sleep(0.05)


async def test_the_same_update_delivered_twice_is_answered_once(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    bot = await start_bot()
    llm.script_for(CHAT_MODEL, "Один ответ.", "Второй не нужен.")
    update_id = tg.push_text(ANN, "привет")
    raw = copy.deepcopy(next(u for u in tg.updates if u["update_id"] == update_id))
    await tg.await_messages(ANN, 1)
    # Telegram sends it again (a webhook whose 200 was lost, a poller that restarted).
    assert await state_of(bot.app).receiver.accept([raw]) == 0
    assert await state_of(bot.app).receiver.accept([raw, raw]) == 0
    await asyncio.sleep(0.5)
    assert tg.texts_to(ANN) == ["Один ответ."]
    assert [role for role, _ in await stored(pool, ANN)] == ["user", "assistant"]
    assert len(llm.requests_for(CHAT_MODEL)) == 1
    inbox = await rows(pool, "SELECT update_id, done_at FROM inbox")
    assert [r["update_id"] for r in inbox] == [update_id] and inbox[0]["done_at"] is not None


async def test_a_stranger_is_refused_before_anything_is_stored(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    stranger = 9102
    await start_bot(allowed_user_ids=[ANN])
    tg.push_text(stranger, "впусти меня", language_code="en")
    assert [m["text"] for m in await tg.await_messages(stranger, 1)] == [t("not_allowed", "en")]
    tg.push_text(ANN, "привет")
    await tg.await_messages(ANN, 1)
    assert await rows(pool, "SELECT 1 FROM inbox WHERE chat_id = %s", stranger) == []
    assert await stored(pool, stranger) == []


async def test_a_reply_stored_before_a_crash_is_sent_once_from_where_it_stopped(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    """The process died after the reply was stored and its first part sent: the update's
    job runs again and sends only the second part, with no model call."""
    bot = await start_bot()
    chat = 9103
    text = "А" * 4000 + "\n\n" + "Б" * 200
    parts = split_message(text)
    assert len(parts) == 2
    update_id = 777_000_001
    repo = state_of(bot.app).service.deps.delivery
    await repo.add_reply(Delivery(update_id, chat), text)
    await repo.record_sent(update_id, 4242)  # part one reached Telegram before the crash
    raw = {"update_id": update_id, "message": tg._message(chat) | {"text": "длинно"}}
    assert await repo.store_updates([(update_id, chat, raw)], QUEUE, TASK) == [update_id]
    await tg.await_messages(chat, 1)
    await settled(pool)
    assert tg.texts_to(chat) == [parts[1]]
    assert llm.requests_for(CHAT_MODEL) == []
    [row] = await rows(pool, "SELECT status, sent_ids FROM outbox WHERE update_id = %s", update_id)
    assert row["status"] == "sent" and row["sent_ids"][0] == 4242 and len(row["sent_ids"]) == 2


async def test_bot_api_5xx_is_retried_with_backoff_and_delivered_once(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    llm.script_for(CHAT_MODEL, "Дошло после двух 500.", "И это тоже.")
    tg.fail_next("sendMessage", 2, 500)
    tg.push_text(ANN, "раз")
    tg.push_text(ANN, "два")  # waits for the first reply: the chat's order is kept
    await tg.await_messages(ANN, 2, timeout=20)
    await settled(pool)
    assert tg.texts_to(ANN) == ["Дошло после двух 500.", "И это тоже."]
    sends = [c for c in tg.calls_of("sendMessage") if c["params"].get("chat_id") == ANN]
    assert len(sends) == 4
    assert sends[2]["time"] - sends[1]["time"] >= 1.9  # the second pause is 2 s
    replies = await rows(pool, "SELECT status, attempts FROM outbox ORDER BY update_id")
    assert [(r["status"], r["attempts"]) for r in replies] == [("sent", 3), ("sent", 1)]


async def test_a_message_that_waited_too_long_is_kept_and_answered_with_one_sentence(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot(turn_wait_limit=60)
    old = tg._message(ANN) | {"text": "вопрос часовой давности", "date": int(time.time()) - 3600}
    tg.push_update({"message": old})
    [answer] = await tg.await_messages(ANN, 1)
    assert answer["text"] == t("waited_too_long", "ru", minutes=60)
    assert llm.requests_for(CHAT_MODEL) == []
    llm.script_for(CHAT_MODEL, "Теперь отвечаю.")
    tg.push_text(ANN, "а сейчас?")
    await tg.await_messages(ANN, 2)
    history = " ".join(str(m) for m in llm.requests_for(CHAT_MODEL)[-1]["messages"])
    assert "вопрос часовой давности" in history  # kept, and seen by the next turn
    assert [role for role, _ in await stored(pool, ANN)] == ["user", "user", "assistant"]


async def test_a_job_that_cannot_get_a_connection_waits_and_answers_once(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any, monkeypatch: Any
) -> None:
    """CI's load test lost a message: a job's checkout waited 30 s behind hundreds of
    memory tasks, raised PoolTimeout, and procrastinate marked the job failed for good."""
    bot = await start_bot()
    llm.script_for(CHAT_MODEL, "Всё равно ответ.")
    delivery = bot.runtime.service.deps.delivery
    real_reply, failures = delivery.reply, []

    async def exhausted_once(update_id: int, *args: Any) -> Any:
        if not failures:
            failures.append(update_id)
            raise PoolTimeout("couldn't get a connection after 30.00 sec")
        return await real_reply(update_id, *args)

    monkeypatch.setattr(delivery, "reply", exhausted_once)
    tg.push_text(ANN, "привет")
    await tg.await_messages(ANN, 1)
    await settled(pool)
    assert failures, "the fault was never met"
    assert tg.texts_to(ANN) == ["Всё равно ответ."]
    assert [role for role, _ in await stored(pool, ANN)] == ["user", "assistant"]
