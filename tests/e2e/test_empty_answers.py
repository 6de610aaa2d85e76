"""Every turn answers something (issue 41): an answer that renders to nothing (an empty
code fence, only whitespace) reaches the user as its raw text, or as a sentence saying the
model answered nothing; Telegram refuses an empty message text, so sending nothing and
marking the reply `sent` is never the outcome.

The real Application against the fake Bot API (which refuses an empty text as Telegram
does), the fake model and real PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest

from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL
from tests.e2e.test_delivery import settled
from tests.e2e.test_reply_formatting import outbox
from tests.fakes.bot_api_server import FakeBotAPI

EMPTY_FENCE = "```\n```"
GROUP = -100_8420


@pytest.mark.parametrize(
    ("chat", "answer"),
    [("private", EMPTY_FENCE), ("group", EMPTY_FENCE), ("private", "&nbsp;")],
)
async def test_an_answer_that_renders_empty_is_sent_as_its_raw_text(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any, chat: str, answer: str
) -> None:
    user = 8410 if chat == "private" else 8411
    kw: dict[str, Any] = {"language_code": "en"}
    if chat == "group":  # the live reply is an edited message there
        kw |= {"chat_id": GROUP, "chat_type": "supergroup"}
    await start_bot(telegram_reply_format="markdown")
    llm.script_for(CHAT_MODEL, answer)
    text = "@tgagent_test_bot show me an empty block" if chat == "group" else "an empty block"
    tg.push_text(user, text, **kw)
    where = kw.get("chat_id", user)
    await tg.await_messages(where, 1)
    await settled(pool)
    assert tg.texts_to(where) == [answer]
    assert await outbox(pool, where) == [("sent", 1)]


@pytest.mark.parametrize("answer", ["   \n\t  ", "\u00a0\u3000\n"])
async def test_an_answer_of_only_whitespace_is_said_to_be_empty(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any, answer: str
) -> None:
    user = 8412
    await start_bot(telegram_reply_format="markdown")
    for lang in ("en", "ru"):
        llm.script_for(CHAT_MODEL, answer)
        before = len(tg.messages_to(user))
        tg.push_text(user, "say nothing", language_code=lang)
        await tg.await_messages(user, before + 1)
        await settled(pool)
        assert tg.texts_to(user)[-1] == t("model_answered_nothing", lang)
    assert await outbox(pool, user) == [("sent", 1), ("sent", 1)]
