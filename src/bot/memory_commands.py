"""/memory and its buttons: what the bot keeps, and deleting it.

In a private chat everything is the user's. In a group the group owns the conversation
and each member owns their facts (keyed by the user id Telegram's update carries): a
member's /memory shows the group's facts and their own; a member may forget and clear
their own facts; the group's facts and past conversations are its administrators' to
delete (an administrator's /memory clear clears the group's whole memory, the members'
facts included, as before).
"""

from __future__ import annotations

import logging

from telegram import Bot, CallbackQuery, Message, Update
from telegram.constants import ChatType
from telegram.error import TelegramError

from src.bot.chats import identity_of
from src.bot.commands import (
    Context,
    lang_of_message,
    may_change_chat,
    may_change_memory,
    message_of,
    say,
)
from src.bot.memory_view import COMPACT, FACT, memory_page, parse_press
from src.bot.rights import presser_role
from src.bot.state import BotState, state_of
from src.graph.rights import Action, may
from src.services.agent_service import Identity
from src.services.texts import t

logger = logging.getLogger(__name__)

CLEAR_WORDS = ("clear", "очистить")
FORGET_WORDS = ("forget", "забыть", "забудь")


async def cmd_memory(update: Update, context: Context) -> None:
    """/memory: what the bot keeps, in pages with a delete button per item; /memory
    forget KEY: delete one fact; /memory clear: delete facts and past conversations
    (a group's member: their own facts only)."""
    message, state = message_of(update), state_of(context)
    lang, identity = lang_of_message(message), identity_of(message)
    word = context.args[0].lower() if context.args else ""
    async with state.order.hold(message.chat_id):
        if word in CLEAR_WORDS:
            await clear(message, context, identity)
            return
        if word in FORGET_WORDS:
            await forget_fact(message, context, " ".join((context.args or [])[1:]))
            return
        page = memory_page(await state.service.memory_report(identity), lang)
        await message.reply_text(
            page.text, reply_markup=page.markup, do_quote=message.chat.type != ChatType.PRIVATE
        )


async def clear(message: Message, context: Context, identity: Identity) -> None:
    """/memory clear: everything in a private chat and for a group's administrator; a
    group's member clears their own facts only."""
    lang, service = lang_of_message(message), state_of(context).service
    if identity.member_id and not await may_change_chat(message, context):
        facts = await service.clear_member_facts(identity)
        await say(message, t("memory_cleared_yours", lang, facts=facts))
        return
    if not await may_change_memory(message, context):
        return
    facts, compacts = await service.clear_memory(identity)
    await say(message, t("memory_cleared", lang, facts=facts, compacts=compacts))


async def forget_fact(message: Message, context: Context, key: str) -> None:
    """/memory forget KEY: delete the fact the user names: in a group the member's own,
    else (an administrator only) the group's."""
    lang, identity = lang_of_message(message), identity_of(message)
    if not key.strip():
        await say(message, t("memory_forget_usage", lang))
        return
    service = state_of(context).service
    if not identity.member_id and not await may_change_memory(message, context):
        return
    admin = not identity.member_id or await may_change_chat(message, context)
    # A member's own fact first; the group's, for an administrator.
    whose = [identity.member_id, 0] if identity.member_id and admin else [identity.member_id]
    forgotten = await service.forget_fact(identity, key, whose)
    if forgotten is None and not admin and await service.fact_named(identity, key) is not None:
        await say(message, t("group_admins_only", lang))  # the group's fact
    elif forgotten is None:
        await say(message, t("memory_no_such_fact", lang, name=key.strip()))
    else:
        await say(message, t("memory_forgot", lang, name=forgotten))


def presser(query: CallbackQuery) -> Identity | None:
    """Return whose memory a /memory button shows the presser: the user's own in their
    private chat, the group's with the presser as its member in a group (None: a
    private chat that is not the presser's)."""
    user, message = query.from_user, query.message
    if message is None:
        return None
    chat, lang = message.chat, user.language_code
    if chat.type == ChatType.PRIVATE:
        return (
            Identity(user.id, user.username, user.first_name, lang) if chat.id == user.id else None
        )
    return Identity(chat.id, chat.username, chat.title, lang, user.id, member_id=user.id)


async def memory_pressed(state: BotState, bot: Bot, query: CallbackQuery) -> None:
    """A press of a /memory button: turn the page (the presser's view), or delete the
    item: in a group, a member's own fact by that member, the group's facts and past
    conversations by an administrator only; a refused press changes nothing."""
    press, lang = parse_press(query.data), query.from_user.language_code
    identity = presser(query)
    if press is None or query.message is None or identity is None:
        await query.answer()
        return
    note = None
    if press.kind in (FACT, COMPACT):
        note = await _delete_item(state, bot, query, identity, press.kind, press.item_id)
        if note is None:
            await query.answer(t("group_admins_only", lang))
            return
    page = memory_page(await state.service.memory_report(identity), lang, press.page)
    await query.answer(note)
    try:
        await query.edit_message_text(page.text, reply_markup=page.markup)
    except TelegramError as exc:  # "message is not modified": the same page again
        logger.debug("could not show the /memory page: %s", exc)


async def _delete_item(
    state: BotState, bot: Bot, query: CallbackQuery, identity: Identity, kind: str, item_id: int
) -> str | None:
    """Delete the fact or compact `item_id` the presser may delete; return what to tell
    them (None: it is the group's and they are not its administrator)."""
    lang, service = identity.language_code, state.service
    fact = None
    if kind == FACT:
        report = await service.memory_report(identity)
        fact = next((f for f in report["facts"] if f.get("id") == item_id), None)
        if fact is None:
            return t("memory_gone", lang)
    whose = int(fact.get("member_id") or 0) if fact is not None else 0
    own = whose != 0 and whose == identity.member_id
    if not own and identity.member_id and not await _admin(state, bot, query):
        return None
    if fact is None:
        gone = await service.forget_compact(identity, item_id)
        return t("memory_compact_forgot" if gone else "memory_gone", lang)
    forgotten = await service.forget_fact(identity, fact["key"], [whose])
    return t("memory_forgot", lang, name=forgotten) if forgotten else t("memory_gone", lang)


async def _admin(state: BotState, bot: Bot, query: CallbackQuery) -> bool:
    """Tell whether the presser may change the group's memory where the button is
    (src/graph/rights.py: its administrators)."""
    return may(await presser_role(state, bot, query), Action.CHANGE_CHAT)


MEMORY_COMMANDS = {"memory": cmd_memory}
