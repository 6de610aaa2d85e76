"""A hostile document ends at its limits with one sentence, holds the chat up no longer
than that, is never read again, and /stop kills its reader (issue 34).

The real Application against the fake Bot API (which serves the file), the fake model and
real PostgreSQL; the document is read in the sandbox's child process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from src.bot.state import state_of
from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL, until
from tests.e2e.test_media import rows
from tests.fakes.bot_api_server import FakeBotAPI
from tests.media_files import child_pids, hostile_pdf_bytes

ANN = 9702


async def test_a_hostile_pdf_gets_one_sentence_and_is_never_read_again(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    bot = await start_bot(document_read_seconds=3)
    llm.script_for(CHAT_MODEL, "I could not read it, sorry.", "Hello!")
    pdf = hostile_pdf_bytes()  # ~75 KB, 300 pages of ~15 s each
    tg.push_document(ANN, "hostile.pdf", pdf, caption="what is in it?", language_code="en")
    sentence, answer = await tg.await_messages(ANN, 2, timeout=60)
    assert sentence["text"] == t("document_too_heavy", "en", name="hostile.pdf")
    assert answer["text"] == "I could not read it, sorry."
    user, _ = await rows(pool, ANN)
    assert user["content"] == "what is in it?"  # the caption goes on, the file does not
    # The chat is free again: the next message is answered.
    tg.push_text(ANN, "hi", language_code="en")
    assert (await tg.await_messages(ANN, 3, timeout=60))[2]["text"] == "Hello!"
    # Sent again, it is refused at once: no second child process reads it.
    tg.push_document(ANN, "again.pdf", pdf, language_code="en")
    refused = (await tg.await_messages(ANN, 4, timeout=60))[3]
    assert refused["text"] == t("document_too_heavy", "en", name="again.pdf")
    assert state_of(bot.app).media.sandbox.children == 1


async def test_stop_while_a_document_is_read_kills_its_reader_at_once(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    bot = await start_bot(document_read_seconds=120)
    llm.script_for(CHAT_MODEL, "Hello!")
    before = child_pids()
    tg.push_document(ANN, "hostile.pdf", hostile_pdf_bytes(), language_code="en")
    await until(lambda: len(child_pids() - before) == 1, 60)
    (reader,) = child_pids() - before
    tg.push_text(ANN, "/stop", language_code="en")
    [stopped] = await tg.await_messages(ANN, 1, timeout=60)
    assert stopped["text"] == t("stopped", "en")
    assert not Path(f"/proc/{reader}").exists()  # killed and reaped, not left to its deadline
    assert await rows(pool, ANN) == []  # nothing kept of a stopped message
    tg.push_text(ANN, "hi", language_code="en")
    assert (await tg.await_messages(ANN, 2, timeout=60))[1]["text"] == "Hello!"
    assert state_of(bot.app).media.sandbox.children == 1
