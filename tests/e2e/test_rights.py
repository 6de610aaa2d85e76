"""Rights travel with the turn: the same request made by command, by button or by asking
the model has the same outcome, for a group's administrator and for a plain member; a
scheduled task's run changes nothing but facts. The real Application against the fake Bot
API, the fake model and real PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from src.bot.task_commands import TASK_DATA
from src.services.texts import t
from src.storage.tasks_repo import TaskRepository
from tests.e2e.conftest import CHAT_MODEL, until
from tests.e2e.test_scheduled_tasks import eventually, schedule
from tests.fakes.bot_api_server import FakeBotAPI

ANN = 9951
BOB = 9952
BOT = "@tgagent_test_bot"
ROLES = ["admin", "member"]


def in_group(tg: FakeBotAPI, group: int, text: str, user: int = BOB) -> None:
    tg.push_text(user, text, chat_id=group, chat_type="supergroup", language_code="en")


def shown(tg: FakeBotAPI, chat: int) -> list[str]:
    """Return every text the chat was sent, edits included."""
    edits = [c["params"] for c in tg.calls_of("editMessageText")]
    return tg.texts_to(chat) + [e["text"] for e in edits if e["chat_id"] == chat]


async def answered(tg: FakeBotAPI, chat: int, text: str) -> None:
    """Wait until the chat was shown `text`."""
    await until(lambda: text in shown(tg, chat), 20)


def tool_results(llm: Any) -> list[str]:
    """Return what every tool call of the chat model's turns answered, in order."""
    seen: list[str] = []
    for request in llm.requests_for(CHAT_MODEL):
        for message in request["messages"]:
            if message["role"] == "tool" and message["content"] not in seen:
                seen.append(message["content"])
    return seen


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "args": args}]}


async def zone_of(bot: Any, owner: int) -> str | None:
    user = await bot.runtime.deps.users.get(owner)
    return user["timezone"] if user is not None else None


@pytest.mark.parametrize("role", ROLES)
async def test_a_groups_time_zone_by_command_and_by_the_model(
    role: str, start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    group = -100_971_000 - ROLES.index(role)
    if role == "admin":
        tg.set_chat_admins(group, BOB)
    bot = await start_bot()
    in_group(tg, group, "/tz Asia/Tokyo")
    [answer] = await tg.await_messages(group, 1)
    by_command = await zone_of(bot, group) == "Asia/Tokyo"
    if role == "member":
        assert answer["text"] == t("group_admins_only", "en")
    else:
        assert answer["text"].startswith("Time zone: Asia/Tokyo")
        await bot.runtime.deps.users.set_timezone(group, None)
    llm.script_for(CHAT_MODEL, call("set_timezone", zone="Asia/Tokyo"), "Noted.")
    in_group(tg, group, f"{BOT} we are all in Tokyo now")
    await answered(tg, group, "Noted.")
    by_model = await zone_of(bot, group) == "Asia/Tokyo"
    assert by_command == by_model == (role == "admin")
    [said] = tool_results(llm)
    if role == "member":
        assert said.startswith("Refused: only the group's administrators may change the time")


@pytest.mark.parametrize("role", ROLES)
async def test_a_groups_tasks_by_button_and_by_the_model(
    role: str, start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    """Scheduling is the model's door only; cancelling has the /tasks button and the
    model's cancel_task. A member meets a refusal at each, an administrator none."""
    group = -100_973_000 - ROLES.index(role)
    if role == "admin":
        tg.set_chat_admins(group, BOB)
    bot = await start_bot()
    repo = TaskRepository(bot.runtime.pool)
    llm.script_for(
        CHAT_MODEL, {"tool_calls": [schedule("tomorrow at 9:00", "Standup")]}, "Scheduled."
    )
    in_group(tg, group, f"{BOT} remind us about the standup tomorrow at 9")
    await answered(tg, group, "Scheduled.")
    scheduled = len(await repo.active(group)) == 1
    assert scheduled == (role == "admin")
    # Two tasks an administrator set (Ann, before): one for the button, one for the model.
    tg.set_chat_admins(group, ANN, *([BOB] if role == "admin" else []))
    for n in (1, 2):
        llm.script_for(
            CHAT_MODEL, {"tool_calls": [schedule("tomorrow at 10:00", f"Task {n}")]}, f"Ok {n}."
        )
        in_group(tg, group, f"{BOT} task {n}", user=ANN)
        await answered(tg, group, f"Ok {n}.")
    first, second = [
        row["id"] for row in await repo.active(group) if row["instruction"] != "Standup"
    ]
    in_group(tg, group, "/tasks")
    await until(lambda: "Task 2" in tg.texts_to(group)[-1], 20)
    page = tg.messages_to(group)[-1]
    tg.push_callback(BOB, group, page["message_id"], f"{TASK_DATA}{first}", language_code="en")
    await until(lambda: len(tg.calls_of("answerCallbackQuery")) == 1)
    [pressed] = tg.calls_of("answerCallbackQuery")
    by_button = (await repo.get(first) or {}).get("status") != "active"
    llm.script_for(CHAT_MODEL, call("cancel_task", id=second), "Done.")
    in_group(tg, group, f"{BOT} cancel task {second}")
    await answered(tg, group, "Done.")
    by_model = (await repo.get(second) or {}).get("status") != "active"
    assert by_button == by_model == (role == "admin")
    if role == "member":
        assert pressed["params"]["text"] == t("group_admins_only", "en")
        refusals = [r for r in tool_results(llm) if r.startswith("Refused")]
        # The model is told why (both calls get the same sentence).
        assert refusals and all("schedule or cancel tasks" in r for r in refusals)


async def squashes(pool: Any, owner: int) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM squash_log l JOIN conversations c"
            " ON c.id = l.conversation_id WHERE c.telegram_user_id = %s",
            (owner,),
        )
        row = await cur.fetchone()
        return int(row["n"])


@pytest.mark.parametrize("role", ROLES)
async def test_a_groups_compression_by_command_and_by_the_model(
    role: str, start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    group = -100_975_000 - ROLES.index(role)
    if role == "admin":
        tg.set_chat_admins(group, BOB)
    bot = await start_bot()
    for n in range(3):
        llm.script_for(CHAT_MODEL, f"answer {n}")
        in_group(tg, group, f"{BOT} message {n}")
        await answered(tg, group, f"answer {n}")
    llm.script_for(CHAT_MODEL, call("compress_last", count=2, summary="Two greetings."), "Ok.")
    in_group(tg, group, f"{BOT} compress the last two messages")
    await answered(tg, group, "Ok.")
    by_model = await squashes(bot.runtime.pool, group) == 1
    llm.script_for(CHAT_MODEL, "Nothing more to compress.")
    in_group(tg, group, "/compress")
    before = len(tg.texts_to(group))
    await until(lambda: len(tg.texts_to(group)) > before, 20)
    by_command = tg.texts_to(group)[-1] != t("group_admins_only", "en")
    assert by_model == by_command == (role == "admin")
    if role == "member":
        [said] = tool_results(llm)
        assert said.startswith("Refused: only the group's administrators may compress")


async def test_a_tasks_run_may_not_move_the_zone_or_schedule_another(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    """A task's instruction comes back as the user's message of a turn with no rights
    to change the chat: its set_timezone and schedule_task calls are refused."""
    bot = await start_bot()
    repo = TaskRepository(bot.runtime.pool)
    llm.script_for(
        CHAT_MODEL,
        {"tool_calls": [schedule("in 2 seconds", "Move me to Tokyo and remind me again")]},
        "Will do.",
        {
            "tool_calls": [
                {"name": "set_timezone", "args": {"zone": "Asia/Tokyo"}},
                schedule("in 1 hour", "again"),
            ]
        },
        "I could not: a task's run may not.",
    )
    tg.push_text(ANN, "in 2 seconds, move me to Tokyo", language_code="en")
    await answered(tg, ANN, "I could not: a task's run may not.")
    assert await zone_of(bot, ANN) is None
    await eventually(lambda: _none_active(repo, ANN))
    refusals = [r for r in tool_results(llm) if r.startswith("Refused")]
    assert len(refusals) == 2 and all("a scheduled task's run may not" in r for r in refusals)


async def _none_active(repo: TaskRepository, owner: int) -> bool:
    return not await repo.active(owner)


async def test_a_turn_whose_authors_rights_cannot_be_asked_acts_as_a_member(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    """Telegram failing getChatMember (a 502) does not fail the turn: it is answered with
    a plain member's rights, and the next turn asks again."""
    group = -100_977_000
    tg.set_chat_admins(group, BOB)
    bot = await start_bot()
    tg.fail_next("getChatMember", error_code=502)
    llm.script_for(CHAT_MODEL, call("set_timezone", zone="Asia/Tokyo"), "First.")
    in_group(tg, group, f"{BOT} we are all in Tokyo now")
    await answered(tg, group, "First.")
    assert await zone_of(bot, group) is None
    llm.script_for(CHAT_MODEL, call("set_timezone", zone="Asia/Tokyo"), "Second.")
    in_group(tg, group, f"{BOT} we are all in Tokyo now, really")
    await answered(tg, group, "Second.")
    assert await zone_of(bot, group) == "Asia/Tokyo"


async def own_facts(pool: Any, group: int, member: int) -> set[str]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT key FROM facts WHERE telegram_user_id = %s AND member_id = %s"
            " AND valid_to IS NULL",
            (group, member),
        )
        return {r["key"] for r in await cur.fetchall()}


@pytest.mark.parametrize("role", ROLES)
async def test_ones_own_facts_by_command_button_and_the_model(
    role: str, start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    """Everyone keeps and forgets facts about themselves in a group: the model's
    remember_fact and forget_fact, `/memory forget KEY` and the 🗑 button all work for an
    administrator and a plain member alike, on their own facts."""
    group = -100_979_000 - ROLES.index(role)
    if role == "admin":
        tg.set_chat_admins(group, BOB)
    bot = await start_bot()
    memory = bot.runtime.deps.memory
    llm.script_for(
        CHAT_MODEL,
        {
            "tool_calls": [
                {"name": "remember_fact", "args": {"key": k, "value": v, "type": "fact"}}
                for k, v in (("city", "Oslo"), ("pet", "Rex"), ("tea", "green"))
            ]
        },
        "Remembered.",
    )
    in_group(tg, group, f"{BOT} I live in Oslo, my dog is Rex, I drink green tea")
    await answered(tg, group, "Remembered.")
    assert await own_facts(pool, group, BOB) == {"city", "pet", "tea"}
    llm.script_for(CHAT_MODEL, call("forget_fact", key="city"), "Forgotten.")
    in_group(tg, group, f"{BOT} forget where I live")
    await answered(tg, group, "Forgotten.")
    in_group(tg, group, "/memory forget pet")
    await answered(tg, group, t("memory_forgot", "en", name="pet"))
    tea = next(f for f in await memory.list_facts(group, members=[BOB]) if f["key"] == "tea")
    in_group(tg, group, "/memory")
    await until(lambda: "green" in tg.texts_to(group)[-1], 20)
    page = tg.messages_to(group)[-1]
    tg.push_callback(BOB, group, page["message_id"], f"mem:f:{tea['id']}:0", language_code="en")
    await until(lambda: len(tg.callback_answers) == 1)
    assert tg.callback_answers[-1]["text"] == t("memory_forgot", "en", name="tea")
    assert await own_facts(pool, group, BOB) == set()
    assert not [r for r in tool_results(llm) if r.startswith("Refused")]
