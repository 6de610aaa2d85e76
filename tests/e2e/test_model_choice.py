"""The user's choice of model (/model) and the fallback model (issue 18).

The real Application against the fake Bot API, the fake model and real PostgreSQL.
"""

from __future__ import annotations

from typing import Any

from src.bot.commands import MODEL_DATA
from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL, until
from tests.fakes.bot_api_server import FakeBotAPI

ANN = 9801
BOB = 9802
GROUP = -100_980_000
BIG = "gpt-4.1"
LOCAL = "llama3:8b"
FALLBACK = "fake-fallback"


def chat_models(llm: Any) -> list[str]:
    """Return the model of every chat request that answered a user, in order."""
    return [r["model"] for r in llm.requests if r["model"] in (CHAT_MODEL, BIG, LOCAL, FALLBACK)]


async def test_model_lists_the_choices_and_a_button_switches_the_next_request(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot(model_choices=f'{{"{BIG}": 1000000, "{LOCAL}": 8192}}')
    tg.push_text(ANN, "/model", language_code="en")
    [listing] = await tg.await_messages(ANN, 1)
    assert listing["text"] == t("model_list", "en", model=CHAT_MODEL)
    shown = tg.bot_message(ANN, listing["message_id"])
    buttons = [row[0] for row in shown["reply_markup"]["inline_keyboard"]]
    assert [b["text"] for b in buttons] == [f"✓ {CHAT_MODEL}", BIG, LOCAL]
    llm.script_for(CHAT_MODEL, "from the default")
    tg.push_text(ANN, "hello", language_code="en")
    await tg.await_messages(ANN, 2)
    tg.push_callback(ANN, ANN, listing["message_id"], f"{MODEL_DATA}1")
    await until(lambda: tg.callback_answers)
    assert tg.callback_answers[-1]["text"] == t("model_set", "en", model=BIG)

    def marked() -> list[str]:
        keyboard = tg.bot_message(ANN, listing["message_id"])["reply_markup"]["inline_keyboard"]
        return [row[0]["text"] for row in keyboard]

    # The press is answered first, then the keyboard is edited: wait for the edit.
    await until(lambda: marked() == [CHAT_MODEL, f"✓ {BIG}", LOCAL])
    llm.script_for(BIG, "from the big one")
    tg.push_text(ANN, "and now?", language_code="en")
    assert (await tg.await_messages(ANN, 3))[-1]["text"] == "from the big one"
    assert chat_models(llm) == [CHAT_MODEL, BIG]
    # By number or name; an unknown one is refused.
    tg.push_text(ANN, "/model 3", language_code="en")
    assert (await tg.await_messages(ANN, 4))[-1]["text"] == t("model_set", "en", model=LOCAL)
    tg.push_text(ANN, "/model gpt-5-ultra", language_code="en")
    choices = ", ".join([CHAT_MODEL, BIG, LOCAL])
    assert (await tg.await_messages(ANN, 5))[-1]["text"] == t(
        "model_unknown", "en", choices=choices
    )
    llm.script_for(LOCAL, "from the local one")
    tg.push_text(ANN, "once more", language_code="en")
    assert (await tg.await_messages(ANN, 6))[-1]["text"] == "from the local one"
    # The choice is this user's: another one still gets the default.
    llm.script_for(CHAT_MODEL, "default for Bob")
    tg.push_text(BOB, "hi")
    assert (await tg.await_messages(BOB, 1))[-1]["text"] == "default for Bob"


async def test_a_choice_no_longer_offered_falls_back_to_the_default(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    bot = await start_bot(model_choices=BIG)
    tg.push_text(ANN, f"/model {BIG}")
    await tg.await_messages(ANN, 1)
    await bot.close()
    await start_bot()  # the operator removed MODEL_CHOICES
    llm.script_for(CHAT_MODEL, "default again")
    tg.push_text(ANN, "hello")
    assert (await tg.await_messages(ANN, 2))[-1]["text"] == "default again"
    tg.push_text(ANN, "/model")
    assert (await tg.await_messages(ANN, 3))[-1]["text"] == t("model_only", "ru", model=CHAT_MODEL)


async def test_in_a_group_only_an_administrator_switches_the_model(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot(model_choices=BIG)
    tg.set_chat_admins(GROUP, BOB)
    name = tg.bot_user["username"]
    tg.push_text(ANN, f"/model@{name} {BIG}", chat_type="group", chat_id=GROUP)
    assert (await tg.await_messages(GROUP, 1))[-1]["text"] == t("group_admins_only", "ru")
    tg.push_text(BOB, f"/model@{name}", chat_type="group", chat_id=GROUP)
    listing = (await tg.await_messages(GROUP, 2))[-1]
    tg.push_callback(ANN, GROUP, listing["message_id"], f"{MODEL_DATA}1")
    await until(lambda: len(tg.callback_answers) == 1)
    assert tg.callback_answers[-1]["text"] == t("group_admins_only", "ru")
    tg.push_callback(BOB, GROUP, listing["message_id"], f"{MODEL_DATA}1")
    await until(lambda: len(tg.callback_answers) == 2)
    assert tg.callback_answers[-1]["text"] == t("model_set", "ru", model=BIG)
    llm.script_for(BIG, "the group's big model")
    tg.push_text(ANN, f"@{name} hello", chat_type="group", chat_id=GROUP)
    assert (await tg.await_messages(GROUP, 3))[-1]["text"] == "the group's big model"


async def test_the_fallback_answers_after_server_errors_and_the_turn_records_it(
    start_bot: Any, tg: FakeBotAPI, llm: Any, pool: Any
) -> None:
    bot = await start_bot(fallback_model=FALLBACK, llm_max_retries=2, stream_replies=False)
    llm.script_for(FALLBACK, "the fallback speaking")
    llm.fail_next(3, 500)  # the first try and both retries of the chosen model
    tg.push_text(ANN, "are you there?")
    assert (await tg.await_messages(ANN, 1))[-1]["text"] == "the fallback speaking"
    assert chat_models(llm) == [CHAT_MODEL] * 3 + [FALLBACK]
    state = await bot.runtime.service.graph.aget_state(
        {"configurable": {"thread_id": await thread_of(pool, ANN)}}
    )
    assert state.values["fallback"] is True and state.values["model"] == FALLBACK
    # Every call is accounted for: the three failures of the chosen model, then the fallback.
    await bot.runtime.service.drain()
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT model, status, error_class FROM llm_calls"
            " WHERE owner_id = %s AND purpose = 'reply' ORDER BY id",
            (ANN,),
        )
        calls = [(r["model"], r["status"], r["error_class"]) for r in await cur.fetchall()]
    # Both, in any order: the recorder writes a turn's records concurrently once its reply
    # is out, so their ids need not follow the calls' order (CI saw the fallback's first).
    expected = [(CHAT_MODEL, "error", "InternalServerError"), (FALLBACK, "ok", None)]
    assert sorted(calls, key=repr) == sorted(expected, key=repr)
    # The next turn tries the chosen model first again.
    llm.script_for(CHAT_MODEL, "back to normal")
    tg.push_text(ANN, "and now?")
    assert (await tg.await_messages(ANN, 2))[-1]["text"] == "back to normal"


async def test_a_live_answer_cut_by_a_lost_connection_is_written_by_the_fallback(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot(fallback_model=FALLBACK)
    llm.script_for(FALLBACK, "the fallback, live")
    llm.close_connection_next(1)
    tg.push_text(ANN, "stream it")
    assert (await tg.await_messages(ANN, 1))[-1]["text"] == "the fallback, live"
    assert chat_models(llm)[-1] == FALLBACK


async def test_a_refused_request_does_not_go_to_the_fallback(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot(fallback_model=FALLBACK)
    llm.fail_next(1, 400)
    tg.push_text(ANN, "bad request", language_code="en")
    assert (await tg.await_messages(ANN, 1))[-1]["text"] == t("model_error", "en")
    assert FALLBACK not in chat_models(llm)


async def thread_of(pool: Any, owner: int) -> str:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT id FROM conversations WHERE telegram_user_id = %s ORDER BY created_at DESC",
            (owner,),
        )
        row = await cur.fetchone()
    return str(row["id"])
