"""A conversation per topic: forum supergroups and private chats with topics.

The real Application against the fake Bot API (with topics, checking every
`message_thread_id` the bot sends as Telegram does), the fake model and real PostgreSQL.
What one topic said must never reach a model request of another topic.
"""

from __future__ import annotations

import asyncio
from typing import Any

from src.bot.live import STOP_DATA
from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL, until
from tests.fakes.bot_api_server import FakeBotAPI

ANN = 9401
FORUM = -100_940_000
BOT = "@tgagent_test_bot"
IN_FORUM = {"chat_id": FORUM, "chat_type": "supergroup"}


def requests_text(llm: Any, start: int = 0) -> list[str]:
    """Return each chat-model request from `start` on as one text (all its messages)."""
    texts = []
    for request in llm.requests_for(CHAT_MODEL)[start:]:
        parts = [m.get("content") for m in request["messages"]]
        texts.append("\n".join(p if isinstance(p, str) else repr(p) for p in parts))
    return texts


def thread_of(entry: dict[str, Any]) -> int | None:
    """Return the topic a sent message or draft was sent into (None: none)."""
    raw = entry["params"].get("message_thread_id")
    return None if raw in (None, "") else int(raw)


async def ask(tg: FakeBotAPI, user: int, text: str, chat: int, **kw: Any) -> dict[str, Any]:
    """Send a text and return the bot's next message in the chat."""
    before = len(tg.messages_to(chat))
    tg.push_text(user, text, **kw)
    return (await tg.await_messages(chat, before + 1, timeout=30))[-1]


async def conversations(pool: Any, owner: int) -> dict[int, list[str]]:
    """Return the owner's stored message texts by topic."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT c.topic_id, m.content FROM conversations c"
            " LEFT JOIN messages m ON m.conversation_id = c.id"
            " WHERE c.telegram_user_id = %s ORDER BY m.id",
            (owner,),
        )
        found: dict[int, list[str]] = {}
        for row in await cur.fetchall():
            texts = found.setdefault(row["topic_id"], [])
            if row["content"] is not None:
                texts.append(row["content"])
        return found


async def test_two_forum_topics_keep_separate_windows_and_new_wipes_one(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    tg.open_forum(FORUM)
    tg.set_chat_admins(FORUM, ANN)
    cats, trips = tg.create_topic(FORUM, "Cats"), tg.create_topic(FORUM, "Trips")
    llm.script_for(CHAT_MODEL, "Мурка — чудесное имя.", "В Казань.", "Про кошек не знаю.")
    reply = await ask(tg, ANN, f"{BOT} мою кошку зовут Мурка", FORUM, **IN_FORUM, topic=cats)
    assert thread_of(reply) == cats
    reply = await ask(tg, ANN, f"{BOT} едем в Казань", FORUM, **IN_FORUM, topic=trips)
    assert thread_of(reply) == trips
    [first, second] = requests_text(llm)
    assert "Мурка" in first and "Казань" not in first
    assert "Казань" in second and "Мурка" not in second
    # The General topic (no thread) is a conversation of its own, as a chat without topics.
    reply = await ask(tg, ANN, f"{BOT} как зовут кошку?", FORUM, **IN_FORUM)
    assert thread_of(reply) is None
    assert "Мурка" not in requests_text(llm)[-1] and "Казань" not in requests_text(llm)[-1]
    stored = await conversations(pool, FORUM)
    assert set(stored) == {0, cats, trips}

    # /new in Cats wipes Cats only: Trips keeps its messages and its checkpoints.
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT id::text AS id, topic_id FROM conversations WHERE telegram_user_id = %s",
            (FORUM,),
        )
        ids = {row["topic_id"]: row["id"] for row in await cur.fetchall()}
    reply = await ask(tg, ANN, "/new", FORUM, **IN_FORUM, topic=cats)
    assert reply["text"] == t("new", "ru") and thread_of(reply) == cats
    after = await conversations(pool, FORUM)
    assert after[cats] == [] and after[trips] == stored[trips] and after[0] == stored[0]
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT thread_id, count(*) AS n FROM checkpoints GROUP BY thread_id"
        )
        checkpoints = {row["thread_id"]: row["n"] for row in await cur.fetchall()}
    assert checkpoints.get(ids[trips], 0) > 0 and ids[cats] not in checkpoints

    llm.script_for(CHAT_MODEL, "Да, в Казань.")
    reply = await ask(tg, ANN, f"{BOT} куда едем?", FORUM, **IN_FORUM, topic=trips)
    assert thread_of(reply) == trips and "Казань" in requests_text(llm)[-1]


async def test_two_private_topics_keep_separate_windows_and_drafts_land_in_theirs(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    tg.private_topics = True
    work, home = tg.create_topic(ANN, "Work"), tg.create_topic(ANN, "Home")
    llm.stream_delay, llm.stream_words = 0.05, True  # long enough for drafts
    words = " ".join(f"отчёт{i}" for i in range(30))
    llm.script_for(CHAT_MODEL, words, "Про ремонт понял.")
    reply = await ask(tg, ANN, "пишу годовой отчёт", ANN, topic=work)
    assert thread_of(reply) == work and reply["text"] == words
    drafts = tg.drafts_to(ANN)
    assert drafts and {thread_of(d) for d in drafts} == {work}
    reply = await ask(tg, ANN, "дома ремонт", ANN, topic=home)
    assert thread_of(reply) == home
    assert "годовой" not in requests_text(llm)[-1]
    assert {thread_of(d) for d in tg.drafts_to(ANN)[len(drafts) :]} <= {home}
    stored = await conversations(pool, ANN)
    assert any("годовой" in text for text in stored[work])
    assert not any("годовой" in text for text in stored[home])


async def test_the_stop_button_lands_in_the_topic_and_stops_its_answer(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot()
    tg.open_forum(FORUM)
    tg.set_chat_admins(FORUM, 1)
    plans = tg.create_topic(FORUM, "Plans")
    llm.stream_delay, llm.stream_words = 0.1, True
    llm.script_for(CHAT_MODEL, " ".join(f"word{i}" for i in range(60)))
    tg.push_text(ANN, f"{BOT} count", **IN_FORUM, topic=plans)
    await until(lambda: bool(tg.messages_to(FORUM)), 20)
    [live] = tg.messages_to(FORUM)
    assert thread_of(live) == plans and live["params"].get("reply_markup")
    button = live["params"]["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    assert button.startswith(STOP_DATA)
    tg.push_callback(ANN, FORUM, live["message_id"], button)
    await until(lambda: bool(tg.callback_answers))
    assert tg.callback_answers[-1]["text"] == t("stopped", "ru")
    await until(lambda: any("⏹" in m["text"] for m in tg.messages_to(FORUM)), 20)


async def test_forget_in_a_topic_leaves_the_other_topics_windows(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot()
    tg.open_forum(FORUM)
    tg.set_chat_admins(FORUM, ANN)
    cats, trips = tg.create_topic(FORUM, "Cats"), tg.create_topic(FORUM, "Trips")
    llm.script_for(CHAT_MODEL, "Мурка.", "Казань.", "Едем в Казань.", "Не помню.")
    await ask(tg, ANN, f"{BOT} мою кошку зовут Мурка", FORUM, **IN_FORUM, topic=cats)
    await ask(tg, ANN, f"{BOT} едем в Казань", FORUM, **IN_FORUM, topic=trips)
    reply = await ask(tg, ANN, "/forget", FORUM, **IN_FORUM, topic=cats)
    assert reply["text"] == t("forget", "ru") and thread_of(reply) == cats
    await ask(tg, ANN, f"{BOT} куда едем?", FORUM, **IN_FORUM, topic=trips)
    assert "едем в Казань" in requests_text(llm)[-1]  # Trips' window is whole
    await ask(tg, ANN, f"{BOT} как зовут кошку?", FORUM, **IN_FORUM, topic=cats)
    assert "Мурка" not in requests_text(llm)[-1]  # Cats forgot it


async def test_a_closed_topic_ends_its_session_with_a_compact(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    tg.open_forum(FORUM)
    cats, trips = tg.create_topic(FORUM, "Cats"), tg.create_topic(FORUM, "Trips")
    llm.script_for(CHAT_MODEL, "Мурка.", "Казань.")
    await ask(tg, ANN, f"{BOT} мою кошку зовут Мурка", FORUM, **IN_FORUM, topic=cats)
    await ask(tg, ANN, f"{BOT} едем в Казань", FORUM, **IN_FORUM, topic=trips)
    tg.push_topic_event(ANN, FORUM, cats, "forum_topic_closed")

    async def compacted() -> dict[int, int]:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT topic_id, count(*) AS n FROM session_compacts"
                " WHERE telegram_user_id = %s GROUP BY topic_id",
                (FORUM,),
            )
            return {row["topic_id"]: row["n"] for row in await cur.fetchall()}

    deadline = asyncio.get_running_loop().time() + 30
    while cats not in await compacted():
        assert asyncio.get_running_loop().time() < deadline, "no compact of the closed topic"
        await asyncio.sleep(0.05)
    assert await compacted() == {cats: 1}  # Trips' session goes on
    assert len(tg.messages_to(FORUM)) == 2  # the closing is not answered


async def test_new_topic_creates_a_private_topic_where_the_chat_allows_it(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    reply = await ask(tg, ANN, "/new topic Отпуск", ANN)
    assert reply["text"] == t("new_topic_failed", "ru") and tg.created_topics == []
    tg.private_topics = True
    reply = await ask(tg, ANN, "/new topic Отпуск", ANN)
    [created] = tg.created_topics
    assert created["name"] == "Отпуск" and thread_of(reply) == created["message_thread_id"]
    assert reply["text"] == t("new_topic", "ru", name="Отпуск")
    llm.script_for(CHAT_MODEL, "Хорошего отпуска!")
    topic = created["message_thread_id"]
    reply = await ask(tg, ANN, "едем на море", ANN, topic=topic)
    assert thread_of(reply) == topic and topic in await conversations(pool, ANN)


async def test_stop_in_one_topic_leaves_another_topics_answer_running(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot()
    tg.open_forum(FORUM)
    cats, trips = tg.create_topic(FORUM, "Cats"), tg.create_topic(FORUM, "Trips")
    llm.stream_delay, llm.stream_words = 0.1, True
    words = " ".join(f"word{i}" for i in range(80))
    llm.script_for(CHAT_MODEL, words)
    tg.push_text(ANN, f"{BOT} count", **IN_FORUM, topic=trips)
    await until(lambda: bool(tg.messages_to(FORUM)), 20)
    [live] = tg.messages_to(FORUM)
    assert thread_of(live) == trips
    # /stop in Cats: nothing runs there; Trips' answer goes on.
    tg.push_text(ANN, "/stop", **IN_FORUM, topic=cats)
    await until(lambda: any(m["text"] == t("nothing_to_stop", "ru") for m in tg.messages_to(FORUM)))
    said = next(m for m in tg.messages_to(FORUM) if m["text"] == t("nothing_to_stop", "ru"))
    assert thread_of(said) == cats
    assert not any("⏹" in m["text"] for m in tg.messages_to(FORUM))
    # /stop in Trips stops it.
    tg.push_text(ANN, "/stop", **IN_FORUM, topic=trips)
    await until(lambda: any("⏹" in m["text"] for m in tg.messages_to(FORUM)), 20)
    stopped = next(m for m in tg.messages_to(FORUM) if "⏹" in m["text"])
    assert stopped["message_id"] == live["message_id"] and words not in stopped["text"]


async def test_a_deleted_topic_ends_its_session_and_its_reply_is_not_retried(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot(stream_replies=False)
    tg.open_forum(FORUM)
    cats, trips = tg.create_topic(FORUM, "Cats"), tg.create_topic(FORUM, "Trips")
    llm.script_for(CHAT_MODEL, "Мурка.", "Казань.")
    await ask(tg, ANN, f"{BOT} мою кошку зовут Мурка", FORUM, **IN_FORUM, topic=cats)
    await ask(tg, ANN, f"{BOT} едем в Казань", FORUM, **IN_FORUM, topic=trips)

    def deleted_meanwhile(request: dict[str, Any]) -> str:
        tg.delete_topic(FORUM, cats)  # a user deletes Cats while its answer is written
        return "Мурка спит."

    llm.script_for(CHAT_MODEL, deleted_meanwhile)
    tg.push_text(ANN, f"{BOT} что делает Мурка?", **IN_FORUM, topic=cats)

    async def compacts() -> dict[int, int]:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT topic_id, count(*) AS n FROM session_compacts"
                " WHERE telegram_user_id = %s GROUP BY topic_id",
                (FORUM,),
            )
            return {row["topic_id"]: row["n"] for row in await cur.fetchall()}

    deadline = asyncio.get_running_loop().time() + 30
    while cats not in await compacts():
        assert asyncio.get_running_loop().time() < deadline, "no compact of the deleted topic"
        await asyncio.sleep(0.05)
    assert await compacts() == {cats: 1}  # Trips' session goes on
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT status, error, attempts FROM outbox WHERE chat_id = %s AND thread_id = %s",
            (FORUM, cats),
        )
        rows = await cur.fetchall()
    gone = [r for r in rows if r["status"] != "sent"]
    assert [(r["status"], r["error"]) for r in gone] == [
        ("rejected", "Message thread not found")  # as python-telegram-bot words it
    ]
    assert gone[0]["attempts"] <= 1  # tried once, not again
    assert tg.texts_to(FORUM) == ["Мурка.", "Казань."]  # nothing more was said anywhere
