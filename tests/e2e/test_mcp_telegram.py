"""/tools in Telegram and the tools offered in a group, by who writes: the real Application
against the fake Bot API, the fake model, a real stdio MCP server and real PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from src.cli.chat import answer_line
from src.graph.rights import Role
from src.services.agent_service import Identity
from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL, until
from tests.fakes.bot_api_server import FakeBotAPI
from tests.integration.test_mcp_tools import offered, stdio_server, write_config

ANN = 9431  # in ADMIN_USER_IDS
BOB = 9432
GROUP = -100_943_000
BOT = "@tgagent_test_bot"


async def test_tools_shows_each_person_what_they_may_use(
    tmp_path: Path, start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    path = write_config(tmp_path, {"fake": stdio_server(allow="admins")})
    tg.set_chat_admins(GROUP, ANN)
    bot = await start_bot(mcp_config=path, admin_user_ids=[ANN], allowed_user_ids=[BOB])
    assert "tools" in tg.menu(ANN, ANN, "en") and "tools" in tg.menu(GROUP, BOB, "en")
    tg.push_text(ANN, "/tools", language_code="en")
    [mine] = await tg.await_messages(ANN, 1)
    assert mine["text"].startswith(t("tools_title", "en")) and "- fake_echo" in mine["text"]
    tg.push_text(BOB, "/tools", language_code="en")
    [his] = await tg.await_messages(BOB, 1)
    assert his["text"] == t("tools_none", "en")
    # In the group: its administrator Ann is offered the tools, its member Bob is not.
    tg.push_text(BOB, "/tools", chat_id=GROUP, chat_type="supergroup", language_code="en")
    await until(lambda: t("tools_none", "en") in tg.texts_to(GROUP), 20)
    for user, reply in ((BOB, "Hi Bob."), (ANN, "Hi Ann.")):
        llm.script_for(CHAT_MODEL, reply)
        tg.push_text(
            user, f"{BOT} hello", chat_id=GROUP, chat_type="supergroup", language_code="en"
        )
        await until(lambda reply=reply: reply in tg.texts_to(GROUP), 20)
    bob_request, ann_request = llm.requests_for(CHAT_MODEL)
    assert not [n for n in offered(bob_request) if n.startswith("fake_")]
    assert "fake_echo" in offered(ann_request)
    # The terminal's user is the one --user-id names: in ADMIN_USER_IDS, the tools are theirs.
    service = bot.runtime.service
    terminal = Identity(ANN, "ann", None, "en", role=Role.TERMINAL)
    assert "- fake_echo" in await answer_line(service, terminal, "/tools")
    other = Identity(BOB, "bob", None, "en", role=Role.TERMINAL)
    assert await answer_line(service, other, "/tools") == t("tools_none", "en")
