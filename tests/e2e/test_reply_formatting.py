"""Replies rendered from the model's Markdown through the real Application: what Telegram
receives is text plus entities it accepts, and shows what the model wrote."""

from __future__ import annotations

from typing import Any

from src.bot.formatting import render_markdown, reply_parts, utf16_len
from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL, until
from tests.e2e.test_delivery import settled
from tests.fakes.bot_api_entities import entities_problem
from tests.fakes.bot_api_server import FakeBotAPI


def covered(message: dict[str, Any], kind: str) -> list[str]:
    """Return the texts a sent message's entities of one type cover (UTF-16 offsets)."""
    units = message["text"].encode("utf-16-le")
    return [
        units[2 * e["offset"] : 2 * (e["offset"] + e["length"])].decode("utf-16-le")
        for e in message["params"].get("entities") or []
        if e["type"] == kind
    ]


async def outbox(pool: Any, chat_id: int) -> list[tuple[str, int]]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT status, cardinality(sent_ids) AS parts FROM outbox WHERE chat_id = %s"
            " ORDER BY update_id",
            (chat_id,),
        )
        return [(r["status"], r["parts"]) for r in await cur.fetchall()]


async def test_a_reply_opening_with_a_fenced_long_line_arrives_whole(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    """The cut used to land right after "```json": an empty part, the reply rejected."""
    user = 8301
    # Room for the long reply under its output cap, which the fake server honours.
    await start_bot(telegram_reply_format="markdown", llm_max_output_tokens=4096)
    data = '{"data":"' + "x" * 5000 + '"}'
    llm.script_for(CHAT_MODEL, f"```json\n{data}\n```\nГотово.")
    tg.push_text(user, "выгрузи json")
    await tg.await_messages(user, 1)
    await settled(pool)
    sent = tg.messages_to(user)
    assert t("internal_error", "ru") not in [m["text"] for m in sent]
    assert len(sent) == 2, [m["text"][:20] for m in sent]
    assert [m["text"] for m in sent] == [data[:4096], data[4096:] + "\nГотово."]
    assert [covered(m, "pre") for m in sent] == [[data[:4096]], [data[4096:]]]
    assert sent[0]["params"]["entities"][0]["language"] == "json"
    attempts = [c for c in tg.calls_of("sendMessage") if c["params"]["chat_id"] == user]
    assert len(attempts) == 2  # none refused on the way
    assert await outbox(pool, user) == [("sent", 2)]


async def test_markdown_is_the_default_and_renders_what_the_model_wrote(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    user = 8302
    await start_bot()
    url = "https://en.wikipedia.org/wiki/C_Sharp_(programming_language)"
    reply = (
        "## C# за 5 минут\n\n"
        f"**Главное:** C# — язык *со **статической** типизацией*, см. [статью]({url}).\n\n"
        "| Тип | Размер |\n|---|---|\n| int | 4 |\n| long | 8 |\n\n"
        "> Цитата из документации\n\n"
        '```csharp\nConsole.WriteLine("Hi");\n```'
    )
    llm.script_for(CHAT_MODEL, reply)
    tg.push_text(user, "расскажи про C#")
    [message] = await tg.await_messages(user, 1)
    text = message["text"]
    for raw in ("**", "##", "](", "|---", "> ", "```"):
        assert raw not in text
    assert text.startswith("C# за 5 минут\n\nГлавное: C# — язык со статической типизацией")
    assert covered(message, "bold") == ["C# за 5 минут", "Главное:", "статической"]
    assert covered(message, "italic") == ["со статической типизацией"]
    assert covered(message, "text_link") == ["статью"]
    assert [e["url"] for e in message["params"]["entities"] if e["type"] == "text_link"] == [url]
    assert covered(message, "blockquote") == ["Цитата из документации"]
    assert covered(message, "pre")[0].split("\n")[2].split() == ["int", "|", "4"]
    assert covered(message, "pre")[1] == 'Console.WriteLine("Hi");'
    assert entities_problem(text, message["params"]["entities"]) is None


async def test_a_long_markdown_reply_is_split_in_utf16_units_with_valid_entities(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    user = 8303
    await start_bot(llm_max_output_tokens=8192)
    paragraph = "**Итог 😀:** *всё* хорошо 👨\u200d👩\u200d👧 " + "🙂" * 600 + " конец."
    reply = "\n\n".join([paragraph] * 10)
    expected = reply_parts(reply, "markdown")
    assert len(expected) >= 3 and utf16_len(reply) > 3 * 4096
    llm.script_for(CHAT_MODEL, reply)
    tg.push_text(user, "много эмодзи")
    sent = await tg.await_messages(user, len(expected))
    assert [m["text"] for m in sent] == [p.text for p in expected]
    for message in sent:
        assert utf16_len(message["text"]) <= 4096
        assert message["text"].startswith("Итог 😀:") and message["text"].endswith("конец.")
        assert covered(message, "bold")[0] == "Итог 😀:"
    whole = render_markdown(reply).text
    assert "\n\n".join(m["text"] for m in sent) == whole
    await settled(pool)
    assert await outbox(pool, user) == [("sent", len(expected))]


async def test_a_group_live_message_becomes_the_formatted_reply(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    """The live message, rendered while the model writes, is edited into the final reply."""
    group, ann = -100_830, 8304
    await start_bot()
    llm.stream_delay, llm.stream_words = 0.05, True
    words = " ".join(f"**слово{i}**" for i in range(40))
    llm.script_for(CHAT_MODEL, words)
    tg.push_text(ann, "@tgagent_test_bot перечисли", chat_type="supergroup", chat_id=group)
    # The final reply is the edit that takes the Stop button away.
    await until(lambda: any(not m["params"].get("reply_markup") for m in tg.messages_to(group)), 20)
    [live] = [m for m in tg.messages_to(group) if m["method"] == "sendMessage"]
    final = tg.messages_to(group)[-1]
    assert final["method"] == "editMessageText" and final["message_id"] == live["message_id"]
    assert covered(final, "bold") == [f"слово{i}" for i in range(40)]
    for shown in tg.messages_to(group):  # rendered while written, too
        assert "**" not in shown["text"]
        assert entities_problem(shown["text"], shown["params"]["entities"]) is None


async def test_a_private_draft_shows_the_markdown_rendered_while_it_is_written(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    user = 8305
    await start_bot()
    llm.stream_delay, llm.stream_words = 0.05, True
    words = " ".join(f"**слово{i}**" for i in range(30))
    llm.script_for(CHAT_MODEL, words)
    tg.push_text(user, "перечисли")
    [final] = await tg.await_messages(user, 1, timeout=20)
    drafts = tg.drafts_to(user)
    assert drafts and all("**" not in d["text"] for d in drafts)
    for draft in drafts:
        entities = draft["params"]["entities"]
        assert entities_problem(draft["text"], entities) is None
        assert len(entities) == len(draft["text"].split())  # each word bold
    assert covered(final, "bold") == [f"слово{i}" for i in range(30)]
