"""Answers shown while they are written: drafts in private chats, an edited message in
groups, the fallbacks between them, and /stop with the Stop button.

The real Application against the fake Bot API, the fake model (streaming one word every
0.1 s: 60 words in 6 s) and real PostgreSQL.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from src.bot.app import build_application, serve
from src.bot.live import EDIT_EVERY, STOP_DATA
from src.bot.state import state_of
from src.graph.context.render import INTERRUPTED_NOTE
from src.services.texts import t
from tests.e2e.conftest import (
    BOT_TOKEN,
    CHAT_MODEL,
    SIDE_MODEL,
    RunningBot,
    stored,
    until,
    wait_until_running,
)
from tests.fakes.bot_api_markup import callback_data_of
from tests.fakes.bot_api_server import FakeBotAPI

ANN = 9301
BOB = 9302
GROUP = -100_930_000
WORDS = " ".join(f"word{i}" for i in range(60))
PACE = 0.1  # seconds between the model's words


@pytest.fixture
def slow_llm(llm: Any) -> Any:
    """The model writes one word every PACE seconds."""
    llm.stream_delay = PACE
    llm.stream_words = True
    return llm


def sends_to(tg: FakeBotAPI, chat: int) -> list[dict[str, Any]]:
    return [m for m in tg.messages_to(chat) if m["method"] == "sendMessage"]


def edits_to(tg: FakeBotAPI, chat: int) -> list[dict[str, Any]]:
    return [m for m in tg.messages_to(chat) if m["method"] == "editMessageText"]


async def test_a_private_answer_grows_in_a_draft_then_comes_whole_once(
    start_bot: Any, tg: FakeBotAPI, slow_llm: Any
) -> None:
    await start_bot()
    slow_llm.script_for(CHAT_MODEL, WORDS)
    tg.push_text(ANN, "count to sixty")
    [final] = await tg.await_messages(ANN, 1, timeout=20)
    assert final["text"] == WORDS
    drafts = tg.drafts_to(ANN)
    assert len(drafts) >= 3
    # The draft grew while the model wrote, well before the answer was whole.
    assert drafts[0]["time"] < final["time"] - 2.0
    assert all(WORDS.startswith(d["text"]) for d in drafts)
    assert len({d["draft_id"] for d in drafts}) == 1 and drafts[0]["draft_id"] != 0
    gaps = [b["time"] - a["time"] for a, b in zip(drafts, drafts[1:], strict=False)]
    assert min(gaps) >= 0.35  # at most one update per ~0.4 s
    assert len(sends_to(tg, ANN)) == 1 and edits_to(tg, ANN) == []


async def test_a_group_answer_is_one_message_edited_at_most_once_a_second(
    start_bot: Any, tg: FakeBotAPI, slow_llm: Any
) -> None:
    await start_bot()
    slow_llm.script_for(CHAT_MODEL, WORDS)
    tg.push_text(ANN, "@tgagent_test_bot count", chat_id=GROUP, chat_type="supergroup")
    # A live update may show every word with Stop still on it: wait for the final edit.
    final = lambda: [  # noqa: E731
        e for e in edits_to(tg, GROUP) if e["text"] == WORDS and not e["params"].get("reply_markup")
    ]
    await until(lambda: bool(final()), 20)
    [live] = sends_to(tg, GROUP)
    assert WORDS.startswith(live["text"]) and live["text"] != WORDS
    assert STOP_DATA in str(live["params"].get("reply_markup"))
    edits = edits_to(tg, GROUP)
    times = [live["time"]] + [e["time"] for e in edits]
    assert min(b - a for a, b in zip(times, times[1:], strict=False)) >= EDIT_EVERY * 0.9
    # The last edit is the final answer, without the Stop button.
    assert edits[-1]["text"] == WORDS and not edits[-1]["params"].get("reply_markup")
    assert tg.drafts_to(GROUP) == []


async def test_the_final_edit_keeps_a_second_after_the_last_live_update(
    start_bot: Any, tg: FakeBotAPI, slow_llm: Any
) -> None:
    """The model writes for 1.6 s: the live message goes out after 1 s, and the final
    answer replaces it no sooner than a second after that (as the requests reach the
    Bot API), not the moment it is stored."""
    await start_bot()
    words = " ".join(f"w{i}" for i in range(16))
    slow_llm.script_for(CHAT_MODEL, words)
    tg.push_text(ANN, "@tgagent_test_bot count", chat_id=GROUP, chat_type="supergroup")
    await until(lambda: any(e["text"] == words for e in edits_to(tg, GROUP)), 20)
    requests = [
        c["time"]
        for c in tg.calls
        if c["method"] in ("sendMessage", "editMessageText") and c["params"]["chat_id"] == GROUP
    ]
    assert len(requests) >= 2  # the live message, then the final edit
    assert min(b - a for a, b in zip(requests, requests[1:], strict=False)) >= EDIT_EVERY


async def test_a_quick_group_answer_is_sent_once_without_edits(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    await start_bot()
    llm.script_for(CHAT_MODEL, "Quick.")
    tg.push_text(ANN, "@tgagent_test_bot hi", chat_id=GROUP, chat_type="supergroup")
    await tg.await_messages(GROUP, 1)
    await asyncio.sleep(EDIT_EVERY + 0.5)
    assert tg.texts_to(GROUP) == ["Quick."]


async def test_stop_mid_answer_sends_the_part_written_and_the_next_turn_sees_it(
    start_bot: Any, tg: FakeBotAPI, slow_llm: Any, pool: Any
) -> None:
    await start_bot()
    slow_llm.script_for(CHAT_MODEL, WORDS)
    tg.push_text(ANN, "count to sixty", language_code="en")
    await until(lambda: len(tg.drafts_to(ANN)) >= 2)
    tg.push_text(ANN, "/stop", language_code="en")
    [final] = await tg.await_messages(ANN, 1, timeout=10)
    mark = "…\n\n⏹ stopped"
    assert final["text"].endswith(mark)
    partial = final["text"].removesuffix(mark)
    assert WORDS.startswith(partial) and len(partial) < len(WORDS)
    await until(lambda: slow_llm.cancelled_streams >= 1)  # the model call was cancelled
    history = await stored(pool, ANN)
    assert history[-1] == ("assistant", partial)
    assert "/stop" not in " ".join(text for _, text in history)  # a control, not a message
    # The next message is answered normally; the model sees the cut answer, marked.
    slow_llm.stream_delay = 0.0
    slow_llm.script_for(CHAT_MODEL, "Fine.")
    tg.push_text(ANN, "ok", language_code="en")
    await tg.await_messages(ANN, 2)
    assert tg.texts_to(ANN)[-1] == "Fine."
    seen = [m["content"] for m in slow_llm.requests_for(CHAT_MODEL)[-1]["messages"]]
    assert any(c.endswith(f"{history[-1][1]}\n{INTERRUPTED_NOTE}") for c in seen)


async def test_stop_with_nothing_running_says_so(start_bot: Any, tg: FakeBotAPI) -> None:
    await start_bot()
    tg.push_text(ANN, "/stop", language_code="en")
    [answer] = await tg.await_messages(ANN, 1)
    assert answer["text"] == t("nothing_to_stop", "en")


async def test_the_stop_button_stops_a_group_answer_for_the_asker_only(
    start_bot: Any, tg: FakeBotAPI, slow_llm: Any
) -> None:
    await start_bot()
    slow_llm.script_for(CHAT_MODEL, WORDS)
    tg.set_chat_admins(GROUP, 1)  # neither Ann nor Bob administers the group
    tg.push_text(ANN, "@tgagent_test_bot count", chat_id=GROUP, chat_type="supergroup")
    await until(lambda: bool(sends_to(tg, GROUP)))
    [live] = sends_to(tg, GROUP)
    tg.push_text(BOB, "/stop@tgagent_test_bot", chat_id=GROUP, chat_type="supergroup")
    await until(lambda: t("stop_not_yours", "ru") in tg.texts_to(GROUP))
    [data] = callback_data_of(live["params"].get("reply_markup"))
    tg.push_callback(ANN, GROUP, live["message_id"], data)
    await until(lambda: bool(tg.callback_answers))
    assert tg.callback_answers[-1]["text"] == t("stopped", "ru")
    await until(lambda: any("⏹" in e["text"] for e in edits_to(tg, GROUP)))
    final = [e for e in edits_to(tg, GROUP) if "⏹" in e["text"]]
    assert len(final) == 1 and not final[0]["params"].get("reply_markup")
    assert len(sends_to(tg, GROUP)) == 2  # the live message and the refusal to Bob


async def test_a_stop_button_left_under_an_old_answer_stops_nothing_else(
    start_bot: Any, tg: FakeBotAPI, slow_llm: Any
) -> None:
    """A live message the final answer could neither replace nor delete keeps its Stop
    button; pressed during the chat's next turn, it stops nothing: it names its turn."""
    await start_bot()
    slow_llm.script_for(CHAT_MODEL, " ".join(f"w{i}" for i in range(15)), WORDS)
    tg.push_text(ANN, "@tgagent_test_bot count", chat_id=GROUP, chat_type="supergroup")
    await until(lambda: bool(sends_to(tg, GROUP)))
    [old] = sends_to(tg, GROUP)
    tg.fail_next("editMessageText", 1, 400, "Bad Request: message can't be edited")
    tg.fail_next("deleteMessage", 1, 400, "Bad Request: message can't be deleted")
    await until(lambda: len(sends_to(tg, GROUP)) == 2, 20)  # the answer, sent anew
    kept = tg.bot_message(GROUP, old["message_id"])
    assert kept is not None
    [data] = callback_data_of(kept.get("reply_markup"))
    tg.push_text(ANN, "@tgagent_test_bot count again", chat_id=GROUP, chat_type="supergroup")
    await until(lambda: len(sends_to(tg, GROUP)) == 3)  # the next turn's live message
    tg.push_callback(ANN, GROUP, old["message_id"], data)
    await until(lambda: bool(tg.callback_answers))
    assert tg.callback_answers[-1]["text"] == t("nothing_to_stop", "ru")
    await until(lambda: any(e["text"] == WORDS for e in edits_to(tg, GROUP)), 20)
    assert not any("⏹" in m["text"] for m in tg.messages_to(GROUP))


async def test_without_drafts_the_private_answer_is_an_edited_message(
    start_bot: Any, tg: FakeBotAPI, slow_llm: Any
) -> None:
    """An older self-hosted Bot API server: sendMessageDraft is not found (404)."""
    await start_bot()
    tg.drafts_supported = False
    slow_llm.script_for(CHAT_MODEL, WORDS)
    tg.push_text(ANN, "count")
    await until(lambda: any(e["text"] == WORDS for e in edits_to(tg, ANN)), 20)
    assert len(sends_to(tg, ANN)) == 1 and len(edits_to(tg, ANN)) >= 2
    assert len(tg.calls_of("sendMessageDraft")) == 1  # tried once, then edits


async def test_a_rejected_draft_falls_back_to_edits(
    start_bot: Any, tg: FakeBotAPI, slow_llm: Any
) -> None:
    await start_bot()
    tg.fail_next("sendMessageDraft", 1, 400, "Bad Request: TEXTDRAFT_PEER_INVALID")
    slow_llm.script_for(CHAT_MODEL, WORDS)
    tg.push_text(ANN, "count")
    await until(lambda: any(e["text"] == WORDS for e in edits_to(tg, ANN)), 20)
    assert len(sends_to(tg, ANN)) == 1 and tg.drafts_to(ANN) == []


async def test_rejected_edits_leave_the_final_message_alone(
    start_bot: Any, tg: FakeBotAPI, slow_llm: Any
) -> None:
    """Edits refused for good: the live message goes, the whole answer comes once."""
    await start_bot()
    slow_llm.script_for(CHAT_MODEL, WORDS)
    tg.fail_next("editMessageText", 50, 400, "Bad Request: message can't be edited")
    tg.push_text(ANN, "@tgagent_test_bot count", chat_id=GROUP, chat_type="supergroup")
    await until(lambda: WORDS in tg.texts_to(GROUP), 20)
    sends = sends_to(tg, GROUP)
    assert [s["text"] for s in sends][-1] == WORDS and len(sends) == 2
    deleted = [c["params"] for c in tg.calls_of("deleteMessage")]
    assert [int(d["message_id"]) for d in deleted] == [sends[0]["message_id"]]
    # One edit was tried while streaming (then live updates stopped), one for the final.
    assert len(tg.calls_of("editMessageText")) == 2


async def test_a_429_during_streaming_pauses_updates_and_loses_nothing(
    start_bot: Any, tg: FakeBotAPI, slow_llm: Any
) -> None:
    await start_bot()
    slow_llm.script_for(CHAT_MODEL, WORDS, WORDS)
    tg.fail_next("sendMessageDraft", 1, 429, retry_after=1)
    tg.fail_next("editMessageText", 1, 429, retry_after=1)
    tg.push_text(ANN, "count")
    tg.push_text(ANN, "@tgagent_test_bot count", chat_id=GROUP, chat_type="supergroup")
    [final] = await tg.await_messages(ANN, 1, timeout=20)
    assert final["text"] == WORDS and tg.drafts_to(ANN)
    await until(lambda: any(e["text"] == WORDS for e in edits_to(tg, GROUP)), 20)
    assert len(sends_to(tg, GROUP)) == 1


async def test_stop_reaches_a_turn_running_in_another_process(
    runtime_factory: Any, tg: FakeBotAPI, slow_llm: Any
) -> None:
    """/stop arrives at the receiving process; the turn runs in a worker process."""
    bots: list[RunningBot] = []
    try:
        for receive, work in ((False, True), (True, False)):
            runtime = await runtime_factory(
                telegram_bot_token=BOT_TOKEN,
                telegram_api_base_url=tg.base_url,
                summary_model=SIDE_MODEL,
                compact_model=SIDE_MODEL,
            )
            app = build_application(runtime.settings, runtime)
            stop = asyncio.Event()
            serving = serve(app, stop, receive=receive, work=work)
            bots.append(RunningBot(app, runtime, stop, asyncio.create_task(serving)))
            await wait_until_running(bots[-1])
        worker, receiver = (state_of(b.app) for b in bots)
        slow_llm.script_for(CHAT_MODEL, WORDS)
        tg.push_text(ANN, "count", language_code="en")
        await until(lambda: len(tg.drafts_to(ANN)) >= 2)
        assert worker.live.stop(0, 0, False) is None and receiver.live.stop(ANN, ANN, False) is None
        tg.push_text(ANN, "/stop", language_code="en")
        [final] = await tg.await_messages(ANN, 1, timeout=10)
        assert final["text"].endswith("…\n\n⏹ stopped")
        tg.push_text(ANN, "/stop", language_code="en")  # now nothing runs anywhere
        await tg.await_messages(ANN, 2)
        assert tg.texts_to(ANN)[-1] == t("nothing_to_stop", "en")
    finally:
        for bot in bots:
            await bot.close()


async def test_a_long_private_answer_continues_in_a_second_draft_and_message(
    start_bot: Any, tg: FakeBotAPI, llm: Any
) -> None:
    """Past 4,096 characters the draft goes on as the next part (its own draft id)."""
    await start_bot(llm_max_output_tokens=4000)
    long = " ".join(f"w{i:04d}" for i in range(1000))  # 5,999 characters
    llm.stream_delay = 0.008  # 16 characters a chunk: about 3 s in all
    llm.script_for(CHAT_MODEL, long)
    tg.push_text(ANN, "a long one")
    sent = await tg.await_messages(ANN, 2, timeout=20)
    assert "".join(m["text"] for m in sent).replace(" ", "") == long.replace(" ", "")
    drafts = tg.drafts_to(ANN)
    assert all(len(d["text"]) <= 4096 for d in drafts)
    ids = sorted({d["draft_id"] for d in drafts})
    assert len(ids) == 2 and ids[1] == ids[0] + 1
    assert all(long.startswith(d["text"]) for d in drafts if d["draft_id"] == ids[0])


async def test_a_running_tool_shows_one_status_line_never_its_output(
    start_bot: Any, tg: FakeBotAPI, slow_llm: Any
) -> None:
    await start_bot()
    search = {"name": "search_history", "args": {"query": "secret-output-marker"}}
    slow_llm.script_for(CHAT_MODEL, {"tool_calls": [search]}, WORDS)
    tg.push_text(ANN, "what did I say about cats?")
    [final] = await tg.await_messages(ANN, 1, timeout=20)
    assert final["text"] == WORDS
    drafts = [d["text"] for d in tg.drafts_to(ANN)]
    assert drafts[0] == t("status_search", "ru")
    assert not any("secret-output-marker" in d or "Found" in d for d in drafts)
    assert WORDS.startswith(drafts[-1])
