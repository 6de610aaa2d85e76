"""Members as themselves (issue 33): in a group the group owns the conversation and each
member owns their facts, keyed by the user id the update carries, never by a name in the
text. The real Application against the fake Bot API, the fake chat and memory models, and
real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from src.services.agent_service import Identity
from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL, SIDE_MODEL, until
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.memory_model import memory_reply
from tests.fakes.openai_server import message_text

GROUP = -100_950_000
ANN, BOB, ADMIN = 9501, 9502, 9503
BOT = "@tgagent_test_bot"
IN_GROUP = {"chat_id": GROUP, "chat_type": "supergroup"}


async def facts(pool: Any) -> set[tuple[int, str, str]]:
    """Return the group's current facts as (member, key, value)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT member_id, key, value FROM facts"
            " WHERE telegram_user_id = %s AND valid_to IS NULL",
            (GROUP,),
        )
        return {(r["member_id"], r["key"], r["value"]) for r in await cur.fetchall()}


async def wait_facts(pool: Any, wanted: set[tuple[int, str, str]]) -> None:
    """Wait until the group's facts include `wanted` (memory work runs after replies)."""
    deadline = asyncio.get_running_loop().time() + 30
    while not wanted <= await facts(pool):
        assert asyncio.get_running_loop().time() < deadline, await facts(pool)
        await asyncio.sleep(0.05)


async def say(tg: FakeBotAPI, user: int, text: str, name: str) -> dict[str, Any]:
    """Send a text in the group as `user` and return the bot's next message there.

    Its next sent message, not an edit: an edit that a button press made may land late.
    """
    before = len(tg.messages_to(GROUP))
    tg.push_text(user, text, first_name=name, **IN_GROUP)

    def sent() -> list[dict[str, Any]]:
        return [m for m in tg.messages_to(GROUP)[before:] if m["method"] == "sendMessage"]

    await until(lambda: bool(sent()), timeout=30)
    return sent()[0]


def last_system(llm: Any) -> str:
    """Return the system prompt (the memory section) of the chat model's last request."""
    return message_text(llm.requests_for(CHAT_MODEL)[-1]["messages"][0])


async def test_a_members_facts_are_theirs_and_never_another_members(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    bot = await start_bot(facts_every=1)
    llm.default_for(SIDE_MODEL, memory_reply)
    llm.default_reply = "Ok."
    await bot.runtime.deps.memory.upsert_fact(ANN, "pet", "Rex")  # her private chat's
    await say(tg, ANN, f"{BOT} my city is Paris", "Ann")
    await wait_facts(pool, {(ANN, "city", "Paris")})
    # Bob writes a line that starts with Ann's name: it is still Bob's.
    await say(tg, BOB, f"{BOT} Ann: my allergy is none", "Bob")
    await wait_facts(pool, {(BOB, "allergy", "none")})
    assert not any(member == ANN and key == "allergy" for member, key, _ in await facts(pool))
    await say(tg, BOB, f"{BOT} my city is Oslo", "Bob")
    await wait_facts(pool, {(BOB, "city", "Oslo")})
    assert (ANN, "city", "Paris") in await facts(pool)  # Bob's city did not replace Ann's

    # The prompt Bob's turn gets holds his facts and never Ann's; and the other way round.
    await say(tg, BOB, f"{BOT} what do you know about me?", "Bob")
    system = last_system(llm)
    assert "allergy: none" in system and "city: Oslo" in system
    assert "Paris" not in system
    await say(tg, ANN, f"{BOT} and about me?", "Ann")
    system = last_system(llm)
    assert "city: Paris" in system and "Oslo" not in system and "allergy" not in system
    assert "Rex" not in system  # nothing of a member's private chat reaches the group
    before = len(tg.messages_to(ANN))
    tg.push_text(ANN, "what do you know about me?", first_name="Ann")
    await tg.await_messages(ANN, before + 1, timeout=30)
    system = last_system(llm)
    assert "pet: Rex" in system and "Paris" not in system  # nor the group's in private

    # /memory shows the group's facts and the asker's own, never another member's.
    bobs = await say(tg, BOB, "/memory", "Bob")
    assert "Oslo" in bobs["text"] and "none" in bobs["text"] and "Paris" not in bobs["text"]
    anns = await say(tg, ANN, "/memory", "Ann")
    assert "Paris" in anns["text"] and "Oslo" not in anns["text"]


async def test_a_members_memory_clear_and_buttons_touch_their_own_facts_only(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    bot = await start_bot()
    tg.set_chat_admins(GROUP, ADMIN)
    memory = bot.runtime.deps.memory
    await memory.upsert_fact(GROUP, "project", "Apollo", "fact", 9)
    await memory.upsert_fact(GROUP, "city", "Paris", "fact", 7, member=ANN)
    await memory.upsert_fact(GROUP, "city", "Oslo", "fact", 7, member=BOB)
    await memory.upsert_fact(GROUP, "tea", "green", "preference", 5, member=BOB)

    # A member's press of the group's fact's button is refused and deletes nothing.
    page = await say(tg, BOB, "/memory", "Bob")
    assert "Apollo" in page["text"] and "Paris" not in page["text"]
    buttons = [b for row in page["params"]["reply_markup"]["inline_keyboard"] for b in row]
    ids = {r["key"]: r["id"] for r in await memory.list_facts(GROUP, members=[0, BOB])}
    project = next(b for b in buttons if b["callback_data"] == f"mem:f:{ids['project']}:0")
    tg.push_callback(BOB, GROUP, page["message_id"], project["callback_data"])
    await until(lambda: len(tg.callback_answers) == 1)
    assert tg.callback_answers[-1]["text"] == t("group_admins_only", "ru")
    assert (0, "project", "Apollo") in await facts(pool)
    # His own fact's button deletes it.
    tea = next(b for b in buttons if b["callback_data"] == f"mem:f:{ids['tea']}:0")
    tg.push_callback(BOB, GROUP, page["message_id"], tea["callback_data"])
    await until(lambda: len(tg.callback_answers) == 2)
    assert tg.callback_answers[-1]["text"] == t("memory_forgot", "ru", name="tea")
    assert (BOB, "tea", "green") not in await facts(pool)
    # Ann cannot delete Bob's fact with his button: she sees and deletes only her own.
    city = f"mem:f:{ids['city']}:0"
    tg.push_callback(ANN, GROUP, page["message_id"], city)
    await until(lambda: len(tg.callback_answers) == 3)
    assert tg.callback_answers[-1]["text"] == t("memory_gone", "ru")
    assert (BOB, "city", "Oslo") in await facts(pool)

    # A member's /memory forget and /memory clear: their own facts only.
    reply = await say(tg, ANN, "/memory forget project", "Ann")  # the group's fact
    assert reply["text"] == t("group_admins_only", "ru")
    reply = await say(tg, ANN, "/memory forget tea", "Ann")  # Bob's: not hers to name
    assert reply["text"] == t("memory_no_such_fact", "ru", name="tea")
    reply = await say(tg, BOB, "/memory clear", "Bob")
    assert reply["text"] == t("memory_cleared_yours", "ru", facts=1)
    assert await facts(pool) == {(0, "project", "Apollo"), (ANN, "city", "Paris")}
    # An administrator's /memory forget reaches the group's facts.
    reply = await say(tg, ADMIN, "/memory forget project", "Admin")
    assert reply["text"] == t("memory_forgot", "ru", name="project")
    assert await facts(pool) == {(ANN, "city", "Paris")}


async def test_remember_fact_in_a_group_is_the_authors(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    await start_bot()
    # The text names Ann; the tool takes no id: the fact is the author's, Bob's.
    remember = {
        "name": "remember_fact",
        "args": {"key": "tea", "value": "oolong", "type": "preference"},
    }
    llm.script_for(CHAT_MODEL, {"tool_calls": [remember]}, "Noted.")
    await say(tg, BOB, f"{BOT} Ann: remember that my tea is oolong", "Bob")
    assert await facts(pool) == {(BOB, "tea", "oolong")}
    forget = {"name": "forget_fact", "args": {"key": "tea"}}
    llm.script_for(CHAT_MODEL, {"tool_calls": [forget]}, "Forgot.")
    await say(tg, ANN, f"{BOT} forget my tea", "Ann")
    assert await facts(pool) == {(BOB, "tea", "oolong")}  # Ann has no tea to forget


async def test_a_groups_export_and_erase_cover_its_members_facts(
    start_bot: Any, tg: FakeBotAPI, pool: Any
) -> None:
    bot = await start_bot()
    service, memory = bot.runtime.service, bot.runtime.deps.memory
    await memory.upsert_fact(GROUP, "project", "Apollo")
    await memory.upsert_fact(GROUP, "city", "Paris", member=ANN)
    await memory.upsert_fact(GROUP, "city", "Rome", member=ANN)  # Paris becomes history
    await memory.upsert_fact(ANN, "pet", "Rex")  # her private chat's: not the group's
    [as_json, _] = await service.export(Identity(GROUP))
    exported = {(f["member_id"], f["key"], f["value"]) for f in json.loads(as_json.data)["facts"]}
    assert exported == {(0, "project", "Apollo"), (ANN, "city", "Rome")}
    [city] = [f for f in json.loads(as_json.data)["facts"] if f["key"] == "city"]
    assert [h["value"] for h in city["history"]] == ["Paris"]
    await service.erase(Identity(GROUP))
    assert await facts(pool) == set()
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM facts WHERE telegram_user_id = %s", (GROUP,)
        )
        assert (await cur.fetchone())["n"] == 0  # history too
    assert [f["value"] for f in await memory.list_facts(ANN)] == ["Rex"]


async def test_a_persons_export_and_erase_take_their_facts_in_groups_too(
    start_bot: Any, tg: FakeBotAPI, pool: Any
) -> None:
    """/export and /erase in a private chat cover everything about the person: their own
    facts kept in groups as a member's too (/export lists them by group, with their
    history); the group's own and other members' are neither shown nor deleted."""
    bot = await start_bot()
    service, memory = bot.runtime.service, bot.runtime.deps.memory
    await memory.upsert_fact(GROUP, "project", "Apollo")
    await memory.upsert_fact(GROUP, "city", "Paris", member=ANN)
    await memory.upsert_fact(GROUP, "city", "Rome", member=ANN)  # Paris becomes history
    await memory.upsert_fact(GROUP, "city", "Oslo", member=BOB)
    await memory.upsert_fact(ANN, "pet", "Rex")
    [as_json, as_markdown] = await service.export(Identity(ANN, language_code="en"))
    exported = json.loads(as_json.data)
    assert [(f["key"], f["value"]) for f in exported["facts"]] == [("pet", "Rex")]
    [in_group] = exported["facts_in_groups"]
    assert in_group["group_id"] == GROUP
    [city] = in_group["facts"]
    assert (city["value"], [h["value"] for h in city["history"]]) == ("Rome", ["Paris"])
    readable = as_markdown.data.decode()
    assert f"### Your facts in the group {GROUP}" in readable and "**city**: Rome" in readable
    assert "Apollo" not in readable and "Oslo" not in readable
    await service.erase(Identity(ANN))
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT telegram_user_id, member_id, key, value FROM facts ORDER BY value"
        )
        left = [tuple(r.values()) for r in await cur.fetchall()]
    assert left == [(GROUP, 0, "project", "Apollo"), (GROUP, BOB, "city", "Oslo")]
