"""Voice notes, photos and documents become part of the conversation (issue 17).

The real Application against the fake Bot API (which serves the files), the fake model
(which transcribes fake speech and checks image parts like OpenAI) and real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from telegram import Update

from src.bot.media import MB
from src.bot.state import state_of
from src.graph.timestamps import strip_stamp
from src.services.agent_service import Identity
from src.services.media import MediaTurn
from src.services.texts import t
from src.storage.delivery_repo import Delivery
from tests.e2e.conftest import CHAT_MODEL, stored
from tests.fakes.audio import fake_speech
from tests.fakes.bot_api_server import FakeBotAPI
from tests.media_files import broken_pdf_bytes, image_bytes, pdf_bytes

ANN = 9701
GROUP = -100_970_000
PAGES = [
    "Quarterly report. Revenue grew by twelve percent.",
    "Costs stayed flat; the new warehouse opened in May.",
    "Outlook: the board approved the Zephyr project for next year.",
]


async def rows(pool: Any, owner: int) -> list[dict[str, Any]]:
    """Return the owner's stored messages: role, content (time stamp removed) and meta."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT m.role, m.content, m.meta FROM messages m JOIN conversations c"
            " ON c.id = m.conversation_id WHERE c.telegram_user_id = %s ORDER BY m.id",
            (owner,),
        )
        found = await cur.fetchall()
    return [{**r, "content": strip_stamp(r["content"])} for r in found]


def chat_requests(llm: Any) -> list[dict[str, Any]]:
    return llm.requests_for(CHAT_MODEL)


def heard_requests(llm: Any) -> list[dict[str, Any]]:
    """Return the transcription requests that carried audio (the start's probe has none)."""
    return [r for r in llm.transcriptions if r["file_name"]]


def image_parts(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        part
        for message in request["messages"]
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


async def test_a_voice_note_is_transcribed_stored_as_voice_and_answered(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    llm.script_for(CHAT_MODEL, "Купите молоко по дороге домой.")
    tg.push_voice(ANN, fake_speech("Напомни купить молоко"), duration=4)
    heard, answer = await tg.await_messages(ANN, 2)
    assert heard["text"] == t("heard", "ru", text="Напомни купить молоко")
    assert answer["text"] == "Купите молоко по дороге домой."
    [request] = heard_requests(llm)
    assert request["model"] == "whisper-1" and request["file_name"].endswith(".ogg")
    user, assistant = await rows(pool, ANN)
    assert user["content"] == "[Voice message 0:04] Напомни купить молоко"
    assert user["meta"] == {"media": ["voice"]}
    assert assistant["content"] == "Купите молоко по дороге домой."
    # The model read the transcript as the user's message.
    last = chat_requests(llm)[-1]["messages"][-1]
    assert last["role"] == "user" and "Напомни купить молоко" in last["content"]


async def test_a_long_transcript_is_not_echoed(start_bot: Any, tg: FakeBotAPI, llm: Any) -> None:
    await start_bot()
    speech = "word " * 100
    llm.script_for(CHAT_MODEL, "A long note, noted.")
    tg.push_voice(ANN, fake_speech(speech), duration=40)
    [answer] = await tg.await_messages(ANN, 1)
    assert answer["text"] == "A long note, noted."


async def test_voice_refusals_get_one_sentence_and_store_nothing(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot(max_voice_seconds=60)
    tg.push_voice(ANN, fake_speech("too long to listen to"), duration=61)
    [too_long] = await tg.await_messages(ANN, 1)
    assert too_long["text"] == t("voice_too_long", "ru", minutes=1.0, limit=1.0)
    assert tg.downloads == []  # refused by its length, never downloaded
    llm.fail_transcriptions_next(1, 500)
    tg.push_voice(ANN, fake_speech("the endpoint fails"))
    assert (await tg.await_messages(ANN, 2))[-1]["text"] == t("voice_failed", "ru")
    tg.push_voice(ANN, fake_speech(""))  # silence
    assert (await tg.await_messages(ANN, 3))[-1]["text"] == t("voice_silent", "ru")
    assert await stored(pool, ANN) == []
    assert chat_requests(llm) == []


async def test_a_captioned_voice_note_whose_transcription_fails_keeps_its_caption(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    llm.fail_transcriptions_next(1, 500)
    llm.script_for(CHAT_MODEL, "Got the caption.")
    tg.push_voice(ANN, fake_speech("lost words"), caption="about the trip")
    failed, answer = await tg.await_messages(ANN, 2)
    assert failed["text"] == t("voice_failed", "ru") and answer["text"] == "Got the caption."
    [user, _] = await rows(pool, ANN)
    assert user["content"] == "about the trip"


async def test_transcription_off_says_so(start_bot: Any, tg: FakeBotAPI, llm: Any) -> None:
    await start_bot(transcribe_model="")
    tg.push_voice(ANN, fake_speech("hello"), language_code="en")
    [answer] = await tg.await_messages(ANN, 1)
    assert answer["text"] == t("voice_off", "en")
    assert llm.transcriptions == []


async def test_a_photo_reaches_a_vision_model_as_an_image_and_its_description_is_stored(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot(vision=True)
    llm.script_for(CHAT_MODEL, "A red square on a white wall.", "It is a red square.")
    tg.push_photo(ANN, caption="What is this?", data=image_bytes(4000, 3000))
    [answer] = await tg.await_messages(ANN, 1)
    assert answer["text"] == "It is a red square."
    describe, turn = chat_requests(llm)
    for request in (describe, turn):
        [part] = image_parts(request)
        assert part["image_url"]["url"].startswith("data:image/jpeg;base64,")
    sizes = {(seen["width"], seen["height"]) for seen in llm.images_seen}
    assert sizes == {(1568, 1176)}  # resized: at most 1568 px on the long side
    # The turn's current message carries the caption and the description as text too.
    current = turn["messages"][-1]
    texts = [p["text"] for p in current["content"] if p["type"] == "text"]
    assert "What is this?" in texts[0] and "A red square on a white wall." in texts[0]
    user, _ = await rows(pool, ANN)
    assert user["content"] == "[Photo: A red square on a white wall.]\n\nWhat is this?"
    assert user["meta"] == {"media": ["photo"]}
    # The image rode in the run's config: no checkpoint holds it.
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM checkpoint_blobs WHERE position(%s IN blob) > 0)"
            " + (SELECT count(*) FROM checkpoint_writes WHERE position(%s IN blob) > 0) AS n",
            (b"base64", b"base64"),
        )
        assert (await cur.fetchone())["n"] == 0
    # Later turns read the stored text; the image is not sent again.
    llm.script_for(CHAT_MODEL, "You showed me a red square.")
    tg.push_text(ANN, "What did I show you?")
    await tg.await_messages(ANN, 2)
    later = chat_requests(llm)[-1]
    assert image_parts(later) == []
    assert any("A red square on a white wall." in str(m["content"]) for m in later["messages"])


async def test_without_vision_a_caption_is_answered_and_a_bare_photo_gets_one_sentence(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    tg.push_photo(ANN, data=image_bytes(640, 480))
    [unseen] = await tg.await_messages(ANN, 1)
    assert unseen["text"] == t("photo_unseen", "ru")
    assert await stored(pool, ANN) == [] and chat_requests(llm) == []
    llm.script_for(CHAT_MODEL, "Nice cat.")
    tg.push_photo(ANN, caption="my cat", data=image_bytes(640, 480))
    assert (await tg.await_messages(ANN, 2))[-1]["text"] == "Nice cat."
    assert image_parts(chat_requests(llm)[-1]) == []
    user, _ = await rows(pool, ANN)
    assert user["content"] == "[Photo]\n\nmy cat"


async def test_a_text_only_model_with_vision_on_answers_from_the_caption(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    llm.vision_models = set()  # the chat model refuses image parts with 400
    await start_bot(vision=True)
    llm.script_for(CHAT_MODEL, "From the caption: a cat.")
    tg.push_photo(ANN, caption="my cat", data=image_bytes(640, 480))
    refused, answer = await tg.await_messages(ANN, 2)
    assert refused["text"] == t("photo_refused", "ru")
    assert answer["text"] == "From the caption: a cat."
    assert image_parts(chat_requests(llm)[-1]) == []
    tg.push_photo(ANN, data=image_bytes(640, 480))  # no caption: nothing to answer
    assert (await tg.await_messages(ANN, 3))[-1]["text"] == t("photo_unseen", "ru")
    await asyncio.sleep(0.3)
    assert len(tg.messages_to(ANN)) == 3


async def test_an_album_of_three_photos_is_one_turn(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot(vision=True)
    llm.script_for(CHAT_MODEL, "Three sunsets over the sea.", "Lovely sunsets!")
    colors = [(250, 120, 0), (240, 90, 10), (230, 60, 20)]
    tg.push_album(ANN, [{"photo": image_bytes(800, 600, color=c)} for c in colors], "my trip")
    [answer] = await tg.await_messages(ANN, 1)
    assert answer["text"] == "Lovely sunsets!"
    await asyncio.sleep(1.0)  # nothing more comes
    assert len(tg.messages_to(ANN)) == 1
    describe, turn = chat_requests(llm)
    assert len(image_parts(describe)) == 3 and len(image_parts(turn)) == 3
    user, assistant = await rows(pool, ANN)
    assert user["content"] == "[3 photos: Three sunsets over the sea.]\n\nmy trip"
    assert user["meta"] == {"media": ["photo"] * 3}
    assert assistant["content"] == "Lovely sunsets!"


async def test_a_group_album_mentioning_the_bot_is_one_turn(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot(vision=True)
    llm.script_for(CHAT_MODEL, "Two receipts.", "The total is 42.")
    photos = [{"photo": image_bytes(600, 800)}, {"photo": image_bytes(600, 800)}]
    username = tg.bot_user["username"]
    tg.push_album(ANN, photos, f"@{username} add these up", chat_type="group", chat_id=GROUP)
    [answer] = await tg.await_messages(GROUP, 1)
    assert answer["text"] == "The total is 42."
    _, turn = chat_requests(llm)
    assert len(image_parts(turn)) == 2
    [user, _] = await rows(pool, GROUP)
    assert user["content"].endswith("add these up")
    assert "[2 photos: Two receipts.]" in user["content"]


async def test_a_pdf_is_read_answered_and_found_by_search_history_later(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    llm.script_for(CHAT_MODEL, "Revenue grew by twelve percent.")
    tg.push_document(ANN, "report.pdf", pdf_bytes(PAGES), caption="Summarize it")
    [answer] = await tg.await_messages(ANN, 1)
    assert answer["text"] == "Revenue grew by twelve percent."
    user, _ = await rows(pool, ANN)
    assert user["content"].startswith("[Document: report.pdf, 3 pages]\n")
    assert all(page.split(".")[0] in user["content"] for page in PAGES)
    assert user["content"].endswith("Summarize it") and user["meta"] == {"media": ["document"]}
    # Much later, the model looks for it with search_history and finds page 3.
    search = {"name": "search_history", "args": {"query": "Zephyr project"}}
    llm.script_for(CHAT_MODEL, {"tool_calls": [search]}, "The board approved Zephyr.")
    tg.push_text(ANN, "What did the board approve?")
    assert (await tg.await_messages(ANN, 2))[-1]["text"] == "The board approved Zephyr."
    tool_results = [m for m in chat_requests(llm)[-1]["messages"] if m["role"] == "tool"]
    assert "board approved the Zephyr project" in tool_results[-1]["content"]


async def test_a_document_without_a_caption_is_acknowledged_and_the_next_message_asks(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    tg.push_document(ANN, "notes.txt", b"Buy a bike.\nCall Mom on Sunday.", language_code="en")
    [ack] = await tg.await_messages(ANN, 1)
    read = t("document_words", "en", name="notes.txt", words=7)
    assert ack["text"] == t("documents_read", "en", files=read)
    assert chat_requests(llm) == []  # nothing to answer yet
    llm.script_for(CHAT_MODEL, "Call Mom on Sunday.")
    tg.push_text(ANN, "When do I call Mom?", language_code="en")
    assert (await tg.await_messages(ANN, 2))[-1]["text"] == "Call Mom on Sunday."
    sent = chat_requests(llm)[-1]["messages"]
    assert any("[Document: notes.txt]" in str(m["content"]) for m in sent)
    assert [r["role"] for r in await rows(pool, ANN)] == ["user", "user", "assistant"]


async def test_a_long_document_is_cut_to_its_budget_with_a_note(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot(document_tokens=200)
    text = "\n".join(f"Line {i}: a sentence about the project." for i in range(400))
    llm.script_for(CHAT_MODEL, "It is about the project.")
    tg.push_document(ANN, "long.md", text.encode(), caption="What is it about?")
    await tg.await_messages(ANN, 1)
    user, _ = await rows(pool, ANN)
    assert "Line 0:" in user["content"] and "Line 399:" not in user["content"]
    assert "[Cut: only the first" in user["content"]


@pytest.mark.parametrize(
    ("name", "data", "key"),
    [
        ("broken.pdf", broken_pdf_bytes(), "document_broken"),
        ("archive.zip", b"PK\x03\x04 not for me", "document_unsupported"),
    ],
)
async def test_a_broken_or_unsupported_document_gets_one_sentence(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any, name: str, data: bytes, key: str
) -> None:
    await start_bot()
    llm.script_for(CHAT_MODEL, "Could you send it as a PDF?")
    tg.push_document(ANN, name, data, caption="read this")
    sentence, answer = await tg.await_messages(ANN, 2)
    assert sentence["text"] == t(key, "ru", name=name)
    # The caption is still a message: answered, not lost.
    assert answer["text"] == "Could you send it as a PDF?"
    user, _ = await rows(pool, ANN)
    assert user["content"] == "read this"


async def test_an_oversized_file_gets_one_sentence_and_is_never_downloaded(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot(max_document_mb=1)
    big = pdf_bytes(PAGES) + b"%" * (2 * MB)
    tg.push_document(ANN, "big.pdf", big)
    [answer] = await tg.await_messages(ANN, 1)
    size = round(len(big) / MB, 1)
    assert answer["text"] == t("file_too_big", "ru", name="big.pdf", size=size, limit=1.0)
    assert tg.downloads == []
    assert await stored(pool, ANN) == [] and chat_requests(llm) == []


async def test_a_voice_note_stored_before_a_crash_is_answered_without_hearing_it_again(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    """The process died after the transcript was stored: the update's job runs again and
    answers the stored message, with no second download or transcription."""
    bot = await start_bot()
    state = state_of(bot.app)
    update_id = 777_000_101
    voice = tg.add_file(fake_speech("купить хлеб"), "voice") | {"duration": 2}
    raw = {"update_id": update_id, "message": tg._message(ANN) | {"voice": voice}}
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO inbox (update_id, chat_id, payload) VALUES (%s, %s, %s)",
            (update_id, ANN, json.dumps(raw)),
        )
    said = "[Voice message 0:02] купить хлеб"
    media = MediaTurn(kinds=["voice"])
    await state.service.remember(Identity(ANN), said, Delivery(update_id, ANN), media)
    llm.script_for(CHAT_MODEL, "Хлеб — записал.")
    await bot.app.process_update(Update.de_json(raw, bot.app.bot))
    [answer] = await tg.await_messages(ANN, 1)
    assert answer["text"] == "Хлеб — записал."
    assert heard_requests(llm) == [] and tg.downloads == []
    assert [(r["role"], r["content"]) for r in await rows(pool, ANN)] == [
        ("user", said),
        ("assistant", "Хлеб — записал."),
    ]


async def test_an_album_counts_once_against_the_rate_limit(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot(user_rate_limit=2)
    llm.script_for(CHAT_MODEL, "Three files, noted.")
    files = [{"document": f"file {i}".encode(), "file_name": f"{i}.txt"} for i in range(3)]
    tg.push_album(ANN, files, "keep these")
    [answer] = await tg.await_messages(ANN, 1)
    assert answer["text"] == "Three files, noted."
    [user, _] = await rows(pool, ANN)
    assert user["meta"] == {"media": ["document"] * 3}
    assert all(f"[Document: {i}.txt]" in user["content"] for i in range(3))
    # One message of the two a minute is left.
    llm.script_for(CHAT_MODEL, "Second.")
    tg.push_text(ANN, "and one more")
    assert (await tg.await_messages(ANN, 2))[-1]["text"] == "Second."


async def test_over_the_token_budget_a_voice_note_is_kept_unheard(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    bot = await start_bot(user_daily_tokens=20)
    llm.script_for(CHAT_MODEL, "First answer.")
    tg.push_text(ANN, "hello", language_code="en")
    await tg.await_messages(ANN, 1)
    await bot.runtime.service.drain()  # its usage is recorded: over 20 tokens
    sent = len(llm.requests)
    tg.push_voice(ANN, fake_speech("what I said"), duration=4, language_code="en")
    answer = (await tg.await_messages(ANN, 2))[-1]
    assert answer["text"].startswith("You have used up your budget")
    assert len(llm.requests) == sent and heard_requests(llm) == [] and tg.downloads == []
    user = [r for r in await rows(pool, ANN) if r["role"] == "user"][-1]
    assert user["content"] == "[Voice message 0:04, not transcribed]"
    assert user["meta"] == {"media": ["voice"]}


async def echo_recorded(pool: Any, update_id: int, timeout: float = 10.0) -> None:
    """Wait until the outbox recorded the update's "heard" echo as sent (before that, a
    worker's death may send it twice: Telegram took it, the outbox did not hear back)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT status FROM outbox WHERE update_id = %s AND kind = 'heard'", (update_id,)
            )
            row = await cur.fetchone()
        if row is not None and row["status"] == "sent":
            return
        assert asyncio.get_running_loop().time() < deadline, "the echo was not recorded"
        await asyncio.sleep(0.02)


async def test_a_voice_note_whose_job_runs_again_echoes_what_it_heard_once(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    """The worker died after the "heard" echo, before the turn stored the message: the
    update's job runs again, hears the note again, and answers it, but the echo (kept in
    the outbox with the update) is not sent a second time."""
    bot = await start_bot()
    state = state_of(bot.app)
    update_id = 777_000_102
    voice = tg.add_file(fake_speech("купить хлеб"), "voice") | {"duration": 2}
    raw = {"update_id": update_id, "message": tg._message(ANN) | {"voice": voice}}
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO inbox (update_id, chat_id, payload) VALUES (%s, %s, %s)",
            (update_id, ANN, json.dumps(raw)),
        )
    heard = t("heard", "ru", text="купить хлеб")
    async with state.service.locks.hold(ANN):  # the turn waits here, after the echo
        first = asyncio.create_task(bot.app.process_update(Update.de_json(raw, bot.app.bot)))
        assert [m["text"] for m in await tg.await_messages(ANN, 1)] == [heard]
        await echo_recorded(pool, update_id)
        # The worker dies: everything of the update stops before the message is stored.
        for task in [first, *state.service._background]:
            task.cancel()
        await asyncio.gather(first, *state.service._background, return_exceptions=True)
    assert await stored(pool, ANN) == []
    llm.script_for(CHAT_MODEL, "Хлеб — записал.")
    await bot.app.process_update(Update.de_json(raw, bot.app.bot))
    await tg.await_messages(ANN, 2)
    assert tg.texts_to(ANN) == [heard, "Хлеб — записал."]
    assert len(heard_requests(llm)) == 2  # heard again: nothing of it was stored


async def test_a_document_whose_job_runs_again_is_acknowledged_once_and_not_answered(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    """A document without a question was stored and acknowledged; its job runs again (its
    worker was taken for dead): nothing is sent again, and no turn answers it."""
    bot = await start_bot()
    state = state_of(bot.app)
    update_id = tg.push_document(ANN, "notes.txt", b"Buy a bike.", language_code="en")
    [ack] = await tg.await_messages(ANN, 1)
    repo = state.service.deps.delivery
    deadline = asyncio.get_running_loop().time() + 10
    while (row := await repo.inbox_row(update_id)) is None or row["done_at"] is None:
        assert asyncio.get_running_loop().time() < deadline, "the job did not finish"
        await asyncio.sleep(0.02)
    await bot.app.process_update(Update.de_json(row["payload"], bot.app.bot))
    assert tg.texts_to(ANN) == [ack["text"]]
    assert chat_requests(llm) == []
    assert [r["role"] for r in await rows(pool, ANN)] == ["user"]
