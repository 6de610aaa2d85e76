"""The documents people send every day are read (issue 41): any text file (JSON, code, logs,
YAML, XML, HTML), known by its content, and Excel sheets and PowerPoint slides; a binary file
named .txt is still refused. Each is read in the sandbox's child process, with its limits.

The real Application against the fake Bot API, the fake model and real PostgreSQL.
"""

from __future__ import annotations

import random
from typing import Any

from src.bot.state import state_of
from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL
from tests.e2e.test_media import rows
from tests.fakes.bot_api_server import FakeBotAPI
from tests.media_files import pptx_bytes, xlsx_bytes

ANN = 9711

# name -> (bytes, what its text must hold)
EVERYDAY: dict[str, tuple[bytes, str]] = {
    "config.json": (b'{"backup": "nightly at 03:00"}\n', '{"backup": "nightly at 03:00"}'),
    "job.py": (b"def backup():\n    return 'nightly'\n", "def backup():\n    return 'nightly'"),
    "server.log": (b"10:00:01 WARN disk 91% full\n", "10:00:01 WARN disk 91% full"),
    "compose.yaml": (b"services:\n  db:\n    image: postgres\n", "  db:\n    image: postgres"),
    "feed.xml": ("<feed><title>Новости</title></feed>\n".encode(), "<title>Новости</title>"),
    "page.html": (b"<html><body><p>Opening hours 9-18</p></body></html>", "Opening hours 9-18"),
    "budget.xlsx": (
        xlsx_bytes({"Q1": [["item", "cost"], ["servers", 1200]]}),
        "## Q1\nitem | cost\nservers | 1200",
    ),
    "plan.pptx": (
        pptx_bytes([("Roadmap", "Launch in May")], notes="mention the beta"),
        "## Slide 1\nRoadmap\nLaunch in May\nNotes: mention the beta",
    ),
}


async def test_everyday_documents_are_read_in_the_sandbox_and_answered(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    bot = await start_bot()
    sandbox = state_of(bot.app).media.sandbox
    for number, (name, (data, held)) in enumerate(EVERYDAY.items(), start=1):
        llm.script_for(CHAT_MODEL, f"Read {name}.")
        tg.push_document(ANN, name, data, caption="what is in it?", language_code="en")
        answers = await tg.await_messages(ANN, number)
        assert answers[-1]["text"] == f"Read {name}.", (name, answers[-1]["text"])
        user = [r for r in await rows(pool, ANN) if r["role"] == "user"][-1]
        assert user["content"].startswith(f"[Document: {name}]\n"), user["content"]
        assert held in user["content"] and user["content"].endswith("what is in it?")
    assert sandbox.children == len(EVERYDAY)  # each read in a child process of its own


async def test_a_binary_file_named_txt_is_still_refused(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    llm.script_for(CHAT_MODEL, "Could you send it again?")
    binary = random.Random(5).randbytes(4096)
    tg.push_document(ANN, "notes.txt", binary, caption="read this", language_code="en")
    sentence, answer = await tg.await_messages(ANN, 2)
    assert sentence["text"] == t("document_broken", "en", name="notes.txt")
    assert answer["text"] == "Could you send it again?"
    [user, _] = await rows(pool, ANN)
    assert user["content"] == "read this"  # nothing of the file stored
