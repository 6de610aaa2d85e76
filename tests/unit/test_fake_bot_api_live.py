"""The fake Bot API's drafts, inline keyboards, button presses and deletions answer as
Telegram does, through a real PTB Bot (and raw HTTP where PTB would not send the request)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import warnings
from typing import Any

import pytest
import telegram
from telegram import InlineKeyboardButton, InlineKeyboardMarkup, ReplyKeyboardMarkup, Update
from telegram.error import BadRequest, Forbidden, InvalidToken, RetryAfter

from tests.fakes.bot_api_server import FakeBotAPI

TOKEN = "123456:TEST-TOKEN"
USER = 7
GROUP = -100_700
STOP = InlineKeyboardMarkup([[InlineKeyboardButton("Stop", callback_data="stop")]])
MORE = InlineKeyboardMarkup([[InlineKeyboardButton("More", callback_data="more")]])


def make_bot(tg: FakeBotAPI) -> telegram.Bot:
    return telegram.Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url)


def raw_call(tg: FakeBotAPI, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Call a method with a JSON body; return (HTTP status, Bot API body)."""
    request = urllib.request.Request(
        f"{tg.base_url}{TOKEN}/{method}",
        data=json.dumps(params).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# ----- drafts ---------------------------------------------------------------------------


async def test_draft_is_recorded_apart_from_messages(tg: FakeBotAPI) -> None:
    async with make_bot(tg) as bot:
        assert await bot.send_message_draft(USER, 5, "Hel") is True
        assert await bot.send_message_draft(USER, 5, "<b>Hello</b>", parse_mode="HTML")
        assert await bot.send_message_draft(USER, 6)  # Bot API 10.0: the "Thinking..." placeholder
        assert await bot.send_message_draft(USER, 6, "<b>" + "x" * 4096 + "</b>", parse_mode="HTML")
    drafts = tg.drafts_to(USER)
    assert [(d["draft_id"], d["text"]) for d in drafts[:3]] == [
        (5, "Hel"),
        (5, "<b>Hello</b>"),
        (6, ""),
    ]
    assert drafts[1]["params"]["parse_mode"] == "HTML" and drafts[0]["time"] > 0
    assert tg.sent == [] and tg.messages_to(USER) == []  # a draft is not a message
    assert tg.drafts_to(USER + 1) == []


async def test_draft_refusals(tg: FakeBotAPI) -> None:
    tg.push_text(1, "hi", chat_type="supergroup", chat_id=GROUP)
    async with make_bot(tg) as bot:
        with pytest.raises(BadRequest, match="(?i)textdraft_peer_invalid"):
            await bot.send_message_draft(GROUP, 1, "x")
        with pytest.raises(BadRequest, match="(?i)textdraft_peer_invalid"):
            await bot.send_message_draft(-42, 1, "x")  # never seen: a group's id
        with pytest.raises(BadRequest, match="(?i)random_id_invalid"):
            await bot.send_message_draft(USER, 0, "x")
        with pytest.raises(BadRequest, match="(?i)message is too long"):
            await bot.send_message_draft(USER, 1, "x" * 4097)
        tg.block_user(USER)
        with pytest.raises(Forbidden, match="blocked"):
            await bot.send_message_draft(USER, 1, "x")
        tg.unblock_user(USER)
        tg.fail_next("sendMessageDraft", 1, error_code=429, retry_after=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PTB 22 warns that the type becomes timedelta
            with pytest.raises(RetryAfter):
                await bot.send_message_draft(USER, 1, "x")
        assert await bot.send_message_draft(USER, 1, "after the faults")
    assert [d["text"] for d in tg.drafts] == ["after the faults"]
    assert len(tg.calls_of("sendMessageDraft")) == 7  # refused calls are recorded too
    assert raw_call(tg, "sendMessageDraft", {"chat_id": USER, "draft_id": "x", "text": "x"}) == (
        400,
        {"ok": False, "error_code": 400, "description": "Bad Request: RANDOM_ID_INVALID"},
    )
    assert raw_call(tg, "sendMessageDraft", {"draft_id": 1})[1]["description"] == (
        "Bad Request: chat_id is empty"
    )


async def test_drafts_unsupported_like_an_unknown_method(tg: FakeBotAPI) -> None:
    tg.drafts_supported = False
    tg.block_user(USER)  # an unknown method is unknown before anything else
    unknown = raw_call(tg, "noSuchMethod", {"chat_id": USER})
    assert raw_call(tg, "sendMessageDraft", {"chat_id": USER, "draft_id": 1, "text": "x"}) == (
        unknown
    )
    assert unknown == (
        404,
        {"ok": False, "error_code": 404, "description": "Not Found: method not found"},
    )
    tg.unblock_user(USER)
    async with make_bot(tg) as bot:
        # PTB reads a 404 as a bad token (only do_api_request knows it as EndPointNotFound).
        with pytest.raises(InvalidToken, match="method not found"):
            await bot.send_message_draft(USER, 1, "x")
        tg.reset()
        assert tg.drafts_supported and await bot.send_message_draft(USER, 1, "x")
    assert tg.drafts == [tg.drafts_to(USER)[0]]


# ----- inline keyboards and edits -------------------------------------------------------


async def test_keyboard_kept_and_compared_by_edits(tg: FakeBotAPI) -> None:
    async with make_bot(tg) as bot:
        sent = await bot.send_message(USER, "working", reply_markup=STOP)
        assert sent.reply_markup == STOP
        mid = sent.message_id
        # The same text with the Stop button again: nothing changes.
        with pytest.raises(BadRequest, match="not modified"):
            await bot.edit_message_text("working", USER, mid, reply_markup=STOP)
        # The same text without reply_markup removes the keyboard, as on Telegram.
        edited = await bot.edit_message_text("working", USER, mid)
        assert isinstance(edited, telegram.Message) and edited.reply_markup is None
        held = tg.bot_message(USER, mid)
        assert held is not None and "reply_markup" not in held and held["text"] == "working"
        with pytest.raises(BadRequest, match="not modified"):
            await bot.edit_message_text("working", USER, mid)
        # Only the formatting changes: a change; the same visible text unformatted is not.
        await bot.edit_message_text("<b>working</b>", USER, mid, parse_mode="HTML")
        await bot.edit_message_text("working", USER, mid, parse_mode="HTML")
        with pytest.raises(BadRequest, match="not modified"):
            await bot.edit_message_text("working", USER, mid)
        back = await bot.edit_message_text("working", USER, mid, reply_markup=STOP)
        assert isinstance(back, telegram.Message) and back.reply_markup == STOP
        assert back.edit_date is not None and back.date == sent.date
    methods = [m["method"] for m in tg.messages_to(USER)]
    assert methods == ["sendMessage"] + ["editMessageText"] * 4


async def test_edit_reply_markup(tg: FakeBotAPI) -> None:
    async with make_bot(tg) as bot:
        mid = (await bot.send_message(USER, "answer", reply_markup=STOP)).message_id
        changed = await bot.edit_message_reply_markup(USER, mid, reply_markup=MORE)
        assert isinstance(changed, telegram.Message) and changed.reply_markup == MORE
        assert changed.text == "answer"
        with pytest.raises(BadRequest, match="not modified"):
            await bot.edit_message_reply_markup(USER, mid, reply_markup=MORE)
        removed = await bot.edit_message_reply_markup(USER, mid)
        assert isinstance(removed, telegram.Message) and removed.reply_markup is None
        with pytest.raises(BadRequest, match="Message to edit not found"):
            await bot.edit_message_reply_markup(USER, mid + 1000, reply_markup=MORE)
        with pytest.raises(BadRequest, match="(?i)inline keyboard expected"):
            await bot.edit_message_reply_markup(
                USER,
                mid,
                reply_markup=ReplyKeyboardMarkup([["a"]]),  # type: ignore[arg-type]
            )
    # An empty keyboard is no keyboard.
    empty = {"chat_id": USER, "message_id": mid, "reply_markup": {"inline_keyboard": []}}
    assert raw_call(tg, "editMessageReplyMarkup", empty)[1]["description"].startswith(
        "Bad Request: message is not modified"
    )
    assert [e["reply_markup"] for e in tg.markup_edits] == [MORE.to_dict(), None]
    assert tg.markup_edits[0]["message_id"] == mid and tg.markup_edits[0]["chat_id"] == USER
    assert tg.texts_to(USER) == ["answer"]  # keyboard edits are not messages


async def test_malformed_keyboards_refused(tg: FakeBotAPI) -> None:
    mute = InlineKeyboardMarkup([[InlineKeyboardButton("no action", callback_data="")]])
    long_data = InlineKeyboardMarkup([[InlineKeyboardButton("x", callback_data="d" * 65)]])
    async with make_bot(tg) as bot:
        with pytest.raises(BadRequest, match="(?i)text buttons are unallowed"):
            await bot.send_message(USER, "x", reply_markup=mute)
        with pytest.raises(BadRequest, match="(?i)button_data_invalid"):
            await bot.send_message(USER, "x", reply_markup=long_data)
        plain = await bot.send_message(USER, "x", reply_markup=ReplyKeyboardMarkup([["a"]]))
        assert plain.reply_markup is None  # a reply keyboard is not part of the message
    assert tg.texts_to(USER) == ["x"]
    status, body = raw_call(tg, "sendMessage", {"chat_id": USER, "text": "x", "reply_markup": 5})
    assert (status, body["description"]) == (
        400,
        "Bad Request: can't parse reply keyboard markup JSON object",
    )
    no_text = {"inline_keyboard": [[{"callback_data": "a"}]]}
    status, body = raw_call(
        tg, "sendMessage", {"chat_id": USER, "text": "x", "reply_markup": no_text}
    )
    assert body["description"] == (
        "Bad Request: can't parse inline keyboard button: Can't find field \"text\""
    )


# ----- deleting -------------------------------------------------------------------------


async def test_delete_message(tg: FakeBotAPI) -> None:
    tg.push_text(1, "hi", chat_type="supergroup", chat_id=GROUP)
    theirs = tg.updates[-1]["message"]["message_id"]
    tg.push_text(USER, "hello")
    mine = tg.updates[-1]["message"]["message_id"]
    async with make_bot(tg) as bot:
        mid = (await bot.send_message(USER, "live", reply_markup=STOP)).message_id
        assert await bot.delete_message(USER, mid) is True
        with pytest.raises(BadRequest, match="Message to edit not found"):
            await bot.edit_message_text("final", USER, mid)
        with pytest.raises(BadRequest, match="Message to delete not found"):
            await bot.delete_message(USER, mid)
        with pytest.raises(BadRequest, match="Message to delete not found"):
            await bot.delete_message(USER, 10**6)
        assert await bot.delete_message(USER, mine)  # incoming messages of a private chat
        with pytest.raises(BadRequest, match="Message can't be deleted"):
            await bot.delete_message(GROUP, theirs)  # not an administrator there
        tg.set_member(GROUP, 999, "administrator")
        assert await bot.delete_message(GROUP, theirs)
    assert tg.bot_message(USER, mid) is None
    assert [(d["chat_id"], d["message_id"]) for d in tg.deleted] == [
        (USER, mid),
        (USER, mine),
        (GROUP, theirs),
    ]
    with pytest.raises(ValueError, match="no message"):
        tg.push_callback(USER, USER, mid, "stop")
    assert raw_call(tg, "deleteMessage", {"chat_id": USER})[1]["description"] == (
        "Bad Request: message identifier is not specified"
    )


# ----- button presses -------------------------------------------------------------------


async def test_callback_round_trip(tg: FakeBotAPI) -> None:
    async with make_bot(tg) as bot:
        sent = await bot.send_message(USER, "working", reply_markup=STOP)
        update_id = tg.push_callback(USER, USER, sent.message_id, "stop", language_code="en")
        raw = tg.updates[-1]
        assert raw["update_id"] == update_id
        update = Update.de_json(raw, bot)
        (polled,) = await bot.get_updates(timeout=5)
        assert polled.to_dict() == update.to_dict()
        query = update.callback_query
        assert query is not None and query.data == "stop" and query.chat_instance
        assert query.from_user.id == USER and query.from_user.language_code == "en"
        message = query.message
        assert isinstance(message, telegram.Message)
        assert message.message_id == sent.message_id and message.chat.id == USER
        assert message.chat.type == "private" and message.reply_markup == STOP
        assert message.from_user is not None and message.from_user.id == 999
        with pytest.raises(BadRequest, match="(?i)message_too_long"):
            await query.answer("x" * 201)
        assert await query.answer("Stopped") is True  # still open after a refused answer
        with pytest.raises(BadRequest, match="(?i)query is too old"):
            await query.answer("again")
        with pytest.raises(BadRequest, match="(?i)query id is invalid"):
            await bot.answer_callback_query("no-such-query")
    assert [(a["callback_query_id"], a["text"], a["data"]) for a in tg.callback_answers] == [
        (query.id, "Stopped", "stop")
    ]
    assert tg.calls_of("answerCallbackQuery")[0]["params"]["callback_query_id"] == query.id


async def test_group_press_and_impossible_presses(tg: FakeBotAPI) -> None:
    tg.push_text(1, "hi", chat_type="supergroup", chat_id=GROUP)
    async with make_bot(tg) as bot:
        mid = (await bot.send_message(GROUP, "working", reply_markup=STOP)).message_id
        plain = (await bot.send_message(USER, "no buttons")).message_id
        private = (await bot.send_message(USER, "mine", reply_markup=STOP)).message_id
        tg.push_callback(2, GROUP, mid, "stop", first_name="Bob")
        update = (await bot.get_updates(timeout=5))[-1]  # after the group member's message
    query = update.callback_query
    assert query is not None and query.from_user.first_name == "Bob"
    assert isinstance(query.message, telegram.Message) and query.message.chat.type == "supergroup"
    with pytest.raises(ValueError, match="no button"):
        tg.push_callback(2, GROUP, mid, "more")
    with pytest.raises(ValueError, match="no button"):
        tg.push_callback(USER, USER, plain, "stop")
    with pytest.raises(ValueError, match="only its user"):
        tg.push_callback(USER + 1, USER, private, "stop")
    with pytest.raises(ValueError, match="no message"):
        tg.push_callback(USER, USER, 10**6, "stop")


async def test_clear_forgets_the_new_records(tg: FakeBotAPI) -> None:
    async with make_bot(tg) as bot:
        mid = (await bot.send_message(USER, "x", reply_markup=STOP)).message_id
        await bot.send_message_draft(USER, 1, "x")
        await bot.edit_message_reply_markup(USER, mid)
        await bot.delete_message(USER, mid)
        sent = await bot.send_message(USER, "y", reply_markup=STOP)
        tg.push_callback(USER, USER, sent.message_id, "stop")
        query_id = tg.updates[-1]["callback_query"]["id"]
        await bot.answer_callback_query(query_id)
        tg.push_callback(USER, USER, sent.message_id, "stop")
        pending = tg.updates[-1]["callback_query"]["id"]
        tg.clear()
        assert (tg.drafts, tg.markup_edits, tg.deleted, tg.callback_answers) == ([], [], [], [])
        with pytest.raises(BadRequest, match="(?i)query id is invalid"):
            await bot.answer_callback_query(pending)  # its update is forgotten too
