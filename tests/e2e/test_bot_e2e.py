"""The real bot Application polling the fake Bot API, with the fake model and real Postgres."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from telegram.error import InvalidToken

from src.bot.app import build_application, serve
from src.services.texts import t
from tests.e2e.conftest import BOT_TOKEN, CHAT_MODEL, stored
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.openai_server import message_text

ROOT = Path(__file__).resolve().parents[2]
ANN = 7001


async def count(pool: Any, sql: str, *params: Any) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute(sql, params)).fetchone()
        return int(row["n"])


def unstamped(content: str) -> str:
    """Return a stored user message without its `[time] ` stamp."""
    return content.split("] ", 1)[1]


def chat_requests(llm: Any) -> list[dict[str, Any]]:
    return list(llm.requests_for(CHAT_MODEL))


async def say(tg: FakeBotAPI, user: int, text: str, **kw: Any) -> str:
    """Send a text as the user and return the bot's (single) answer."""
    before = len(tg.messages_to(kw.get("chat_id", user)))
    tg.push_text(user, text, **kw)
    return str((await tg.await_messages(kw.get("chat_id", user), before + 1))[-1]["text"])


async def test_private_conversation(start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any) -> None:
    """/start, three messages, /forget, /new, media, a long reply, a 429, the commands."""
    # Room for the long reply below (about 2,800 tokens as the fake server counts them).
    await start_bot(llm_max_output_tokens=4096)
    assert {"help", "new", "forget", "mute", "memory"} <= set(tg.menu(ANN, ANN, "en"))
    assert tg.menu(ANN, ANN, "ru")["new"] == t("cmd_new", "ru")
    assert await say(tg, ANN, "/start", first_name="Ann") == t("greeting", "ru", name="Ann")
    llm.script_for(CHAT_MODEL, "Привет, Аня!", "Чай — отличный выбор.", "Вы любите чай.")
    assert await say(tg, ANN, "Меня зовут Аня") == "Привет, Аня!"
    assert await say(tg, ANN, "Я люблю чай") == "Чай — отличный выбор."
    assert await say(tg, ANN, "Что я люблю?") == "Вы любите чай."
    third = " ".join(message_text(m) for m in chat_requests(llm)[-1]["messages"])
    assert "Меня зовут Аня" in third and "Чай — отличный выбор." in third
    assert {"chat_id": ANN, "action": "typing"}.items() <= tg.actions[0].items()

    # /forget: the next request carries no history; the history stays in the database.
    assert await say(tg, ANN, "/forget") == t("forget", "ru")
    llm.script_for(CHAT_MODEL, "Не знаю, расскажите.")
    assert await say(tg, ANN, "Как меня зовут?") == "Не знаю, расскажите."
    request = chat_requests(llm)[-1]["messages"]
    body = [m for m in request if m["role"] != "system"]
    assert len(body) == 1 and "Как меня зовут?" in message_text(body[0])
    assert len(await stored(pool, ANN)) == 8  # four exchanges, none lost
    # /mute after /forget (which turned reminders off) turns them back on.
    assert await say(tg, ANN, "/mute") == t("unmuted", "ru")
    report = await say(tg, ANN, "/memory")
    assert report.startswith(t("memory_title", "ru")) and t("memory_reminders_on", "ru") in report

    # /new: the conversation is wiped.
    assert await say(tg, ANN, "/new") == t("new", "ru")
    assert await stored(pool, ANN) == []

    # What cannot be read: a clear answer, nothing stored. Without VISION, a photo's
    # caption is answered (voice notes, photos, documents: tests/e2e/test_media.py).
    tg.push_sticker(ANN)
    answers = await tg.await_messages(ANN, len(tg.messages_to(ANN)) + 1)
    assert answers[-1]["text"] == t("not_text", "ru")
    llm.script_for(CHAT_MODEL, "Фото я пока не вижу.")
    before = len(tg.messages_to(ANN))
    tg.push_photo(ANN, caption="Что на фото?")
    assert (await tg.await_messages(ANN, before + 1))[-1]["text"] == "Фото я пока не вижу."

    # Edits are answered with silence (checked by the exact count of stored messages below).
    tg.push_edited_text(ANN, "Что на этом фото?")

    # A reply longer than 4096 characters arrives in pieces, cut between paragraphs.
    paragraphs = [f"Часть {i}. " + "слово " * 160 for i in range(9)]
    long_reply = "\n\n".join(p.strip() for p in paragraphs)
    assert len(long_reply) > 2 * 4096
    llm.script_for(CHAT_MODEL, long_reply)
    before = len(tg.messages_to(ANN))
    tg.push_text(ANN, "Расскажи подробно")
    await tg.await_messages(ANN, before + 3)
    await asyncio.sleep(0.2)
    pieces = [m["text"] for m in tg.messages_to(ANN)[before:]]
    assert len(pieces) == 3 and all(len(p) <= 4096 for p in pieces)
    assert "\n\n".join(pieces) == long_reply

    # A 429 on sendMessage: the rate limiter waits retry_after and sends again.
    tg.fail_next("sendMessage", 1, 429, retry_after=1)
    llm.script_for(CHAT_MODEL, "Ответ после паузы.")
    failed_before = len(tg.calls_of("sendMessage"))
    assert await say(tg, ANN, "Ещё вопрос") == "Ответ после паузы."
    assert len(tg.calls_of("sendMessage")) == failed_before + 2

    assert await say(tg, ANN, "/whatever") == t("unknown_command", "ru")
    compress = await say(tg, ANN, "/compress")
    assert compress not in (t("compress_failed", "ru"), t("internal_error", "ru"))
    cleared = await say(tg, ANN, "/memory clear")
    assert cleared.startswith(t("memory_cleared", "ru", facts=0, compacts=0).split("(")[0])

    rows = await stored(pool, ANN)
    users = [unstamped(c) for role, c in rows if role == "user"]
    assert users == ["[Photo]\n\nЧто на фото?", "Расскажи подробно", "Ещё вопрос"]
    assert [c for role, c in rows if role == "assistant"][-2:] == [long_reply, "Ответ после паузы."]


async def test_markdown_replies_fall_back_to_plain_text(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot()  # Markdown is the default
    llm.script_for(CHAT_MODEL, "**Жирный** ответ", "**Снова** ответ")
    assert await say(tg, ANN, "раз") == "Жирный ответ"
    bold = [{"type": "bold", "offset": 0, "length": 6}]
    assert tg.messages_to(ANN)[-1]["params"]["entities"] == bold
    tg.reject_parse_mode = True  # Telegram refuses the formatting
    assert await say(tg, ANN, "два") == "Снова ответ"
    assert "entities" not in tg.messages_to(ANN)[-1]["params"]
    attempts = tg.calls_of("sendMessage")[-2:]
    assert attempts[0]["params"].get("entities") == [bold[0] | {"length": 5}]


async def test_refused_user_leaves_no_trace(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    stranger = 7100
    await start_bot(allowed_user_ids=[ANN])
    tg.push_text(stranger, "hello", language_code="en")
    tg.push_text(stranger, "/new")
    tg.push_photo(stranger, caption="look")
    answers = await tg.await_messages(stranger, 3)
    assert sorted(m["text"] for m in answers) == sorted(
        [t("not_allowed", "en"), t("not_allowed", "ru"), t("not_allowed", "ru")]
    )
    llm.script_for(CHAT_MODEL, "Здравствуйте!")
    assert await say(tg, ANN, "Привет") == "Здравствуйте!"
    assert len(chat_requests(llm)) == 1
    for table in ("users", "conversations"):
        sql = f"SELECT count(*) AS n FROM {table} WHERE telegram_user_id = %s"
        assert await count(pool, sql, stranger) == 0
    assert await count(pool, "SELECT count(*) AS n FROM users") == 1


async def test_group_answers_only_when_addressed(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    group, ann, bob = -100200, 7201, 7202
    kw = {"chat_type": "supergroup", "chat_id": group}
    await start_bot()
    llm.script_for(CHAT_MODEL, "Четыре.", "Шесть.")
    tg.push_text(ann, "всем привет", first_name="Ann", **kw)
    tg.push_text(bob, "/help@some_other_bot", first_name="Bob", **kw)
    tg.push_text(bob, "@tgagent_test_bot сколько будет 2+2?", first_name="Bob", **kw)
    tg.push_text(ann, "а 3+3?", first_name="Ann", reply_to_bot=True, **kw)
    answers = await tg.await_messages(group, 2)
    await asyncio.sleep(0.3)
    assert [m["text"] for m in tg.messages_to(group)] == ["Четыре.", "Шесть."]
    assert all("reply_parameters" in m["params"] for m in answers)
    rows = await stored(pool, group)
    assert [unstamped(c) for role, c in rows if role == "user"] == [
        "Bob: сколько будет 2+2?",
        'Ann: [In reply to your message: "previous bot message"]\nа 3+3?',  # what it answers
    ]
    for user in (ann, bob):  # the group's memory is the chat's, not its members'
        sql = "SELECT count(*) AS n FROM users WHERE telegram_user_id = %s"
        assert await count(pool, sql, user) == 0


async def test_one_chat_stays_in_order(start_bot: Any, tg: FakeBotAPI, llm: Any) -> None:
    await start_bot()

    def echo(request: dict[str, Any]) -> str:
        last = [m for m in request["messages"] if m["role"] == "user"][-1]
        return "re: " + message_text(last).rsplit("] ", 1)[-1]

    llm.default_reply = echo
    texts = [f"message {i}" for i in range(6)]
    for text in texts:
        tg.push_text(ANN, text)
    answers = await tg.await_messages(ANN, len(texts), timeout=20)
    assert [m["text"] for m in answers] == [f"re: {text}" for text in texts]


@pytest.mark.slow
async def test_thirty_users_at_once(start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any) -> None:
    await start_bot()
    llm.delay = 0.2  # long enough for turns to overlap
    users = list(range(7300, 7330))
    for user in users:
        tg.push_text(user, f"Привет от {user}")
    for user in users:
        await tg.await_messages(user, 1, timeout=40)
    assert llm.max_concurrent > 1  # different chats really ran concurrently
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT c.telegram_user_id AS owner, m.role, m.content FROM messages m"
            " JOIN conversations c ON c.id = m.conversation_id ORDER BY m.id"
        )
        rows = await cur.fetchall()
    for user in users:
        mine = [(r["role"], r["content"]) for r in rows if r["owner"] == user]
        assert [role for role, _ in mine] == ["user", "assistant"]
        assert unstamped(mine[0][1]) == f"Привет от {user}"
        assert tg.texts_to(user) == [mine[1][1]]


async def test_a_user_who_blocked_the_bot_costs_nothing_but_a_log_line(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    gone = 7150
    await start_bot()
    tg.block_user(gone)
    llm.script_for(CHAT_MODEL, "Ответ, который не дойдёт.", "Ответ Ане.")
    with caplog.at_level(logging.INFO, logger="src.bot"):
        tg.push_text(gone, "последнее слово")
        while not any(c["params"].get("chat_id") == gone for c in tg.calls_of("sendMessage")):
            await asyncio.sleep(0.02)
        assert await say(tg, ANN, "Привет") == "Ответ Ане."
        for _ in range(250):
            if any("cannot write to the chat" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.02)
    assert any("cannot write to the chat" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r for r in await stored(pool, gone) if r[0] == "user"]  # the message was kept
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT status FROM outbox WHERE chat_id = %s", (gone,))
        assert [r["status"] for r in await cur.fetchall()] == ["blocked"]


async def test_user_rate_limit(start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any) -> None:
    await start_bot(user_rate_limit=2)
    for i in range(4):
        tg.push_text(ANN, f"flood {i}")
    await tg.await_messages(ANN, 3)
    await asyncio.sleep(0.3)
    texts = tg.texts_to(ANN)
    assert len(texts) == 3 and texts.count(t("rate_limited", "ru")) == 1
    assert len([r for r in await stored(pool, ANN) if r[0] == "user"]) == 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_webhook_mode(start_bot: Any, tg: FakeBotAPI, llm: Any) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/tg/hook"
    await start_bot(
        webhook_url=url,
        webhook_listen="127.0.0.1",
        webhook_port=port,
        webhook_secret_token="s3cret-Token_1",
    )
    call = tg.calls_of("setWebhook")[-1]["params"]
    assert call["url"] == url and call["secret_token"] == "s3cret-Token_1"
    assert not tg.calls_of("getUpdates")
    factory = FakeBotAPI(BOT_TOKEN)  # builds the update; Telegram would POST it
    factory.push_text(ANN, "/help")
    body = json.dumps(factory.updates[-1])
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=body, headers=headers) as response:
            assert response.status == 403  # no secret: refused
        headers["X-Telegram-Bot-Api-Secret-Token"] = "s3cret-Token_1"
        async with http.post(url, data=body, headers=headers) as response:
            assert response.status == 200
    assert (await tg.await_messages(ANN, 1))[0]["text"] == t("help", "ru")
    assert len(tg.messages_to(ANN)) == 1


async def test_a_rejected_token_stops_the_bot(runtime_factory: Any, tg: FakeBotAPI) -> None:
    runtime = await runtime_factory(
        telegram_bot_token="123456:WRONG", telegram_api_base_url=tg.base_url
    )
    with pytest.raises(InvalidToken):
        await serve(build_application(runtime.settings, runtime), asyncio.Event())


def test_cli_without_token_says_so(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TELEGRAM_")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "src.cli", "bot"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "TELEGRAM_BOT_TOKEN" in out.stderr


@pytest.mark.slow
async def test_tgagent_bot_serves_until_sigterm(
    pool: Any, fresh_schema: str, tg: FakeBotAPI, llm: Any, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "OPENAI_"))}
    env.pop("TEST_DATABASE_URL", None)
    env |= {
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": fresh_schema,
        "TELEGRAM_BOT_TOKEN": BOT_TOKEN,
        "TELEGRAM_API_BASE_URL": tg.base_url,
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
    }
    llm.script("Привет из процесса!")
    proc = subprocess.Popen(
        [sys.executable, "-m", "src.cli", "bot"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not tg.calls_of("getUpdates"):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            await asyncio.sleep(0.05)
        assert await say(tg, ANN, "Привет") == "Привет из процесса!"
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(proc.communicate, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert BOT_TOKEN not in err and "Traceback" not in err
