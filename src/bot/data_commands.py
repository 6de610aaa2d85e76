"""/export and /erase: everything the bot keeps about the chat's memory owner, sent as
files or erased (src/services/export.py, src/services/erasure.py).

Both act on the chat's memory owner: the user in a private chat, the group in a group,
where only its administrators may use them. /erase asks first, with a button (or
`/erase yes` typed); its press is handled where presses arrive (src/bot/receive.py).
"""

from __future__ import annotations

import logging

from telegram import (
    Bot,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputFile,
    Update,
)
from telegram.error import TelegramError

from src.bot.chats import identity_of, is_private
from src.bot.commands import (
    Context,
    lang_of_message,
    may_change_memory,
    message_of,
    pressing_owner,
    say,
)
from src.bot.sending import typing
from src.bot.state import BotState, state_of
from src.services.erasure import CONFIRM_WORDS, erased_sentence
from src.services.texts import t

logger = logging.getLogger(__name__)

# The data of /erase's confirmation button.
ERASE_DATA = "erase:yes"


async def cmd_export(update: Update, context: Context) -> None:
    """/export: send the chat's memory owner everything the bot keeps about them, as a
    JSON file and its Markdown twin (in a group: its administrators only)."""
    message, state = message_of(update), state_of(context)
    lang = lang_of_message(message)
    async with state.order.hold(message.chat_id):
        if not await may_change_memory(message, context):
            return
        async with typing(message):
            files = await state.service.export(identity_of(message))
            for file in files:
                await message.reply_document(
                    InputFile(file.data, filename=file.name),
                    caption=t("export_caption", lang, name=file.name),
                    do_quote=not is_private(message),
                )


async def cmd_erase(update: Update, context: Context) -> None:
    """/erase: ask to confirm with a button; /erase yes: delete everything the bot keeps
    about the chat's memory owner (in a group: its administrators only)."""
    message, state = message_of(update), state_of(context)
    lang = lang_of_message(message)
    async with state.order.hold(message.chat_id):
        if not await may_change_memory(message, context):
            return
        if not (context.args and context.args[0].lower() in CONFIRM_WORDS):
            button = InlineKeyboardButton(t("erase_button", lang), callback_data=ERASE_DATA)
            await message.reply_text(
                t("erase_confirm", lang),
                reply_markup=InlineKeyboardMarkup([[button]]),
                do_quote=not is_private(message),
            )
            return
        erased = await state.service.erase(identity_of(message), update.update_id)
        await say(message, erased_sentence(erased, lang))


async def erase_pressed(state: BotState, bot: Bot, query: CallbackQuery) -> None:
    """A press of /erase's button: erase the chat's memory owner (in a group, an
    administrator only) and say so in place of the question."""
    lang = query.from_user.language_code
    identity = await pressing_owner(state, bot, query)
    if identity is None or query.message is None:
        await query.answer(t("group_admins_only", lang))
        return
    try:
        text = erased_sentence(await state.service.erase(identity), lang)
    except Exception:
        logger.exception("/erase of %s failed", identity.owner_id)
        await query.answer(t("erase_failed", lang))
        return
    await query.answer()
    try:
        await query.edit_message_text(text)
    except TelegramError as exc:
        logger.info("could not edit the /erase question (%s): sending the answer", exc)
        await bot.send_message(query.message.chat.id, text)


DATA_COMMANDS = {
    "export": cmd_export,
    "erase": cmd_erase,
}
