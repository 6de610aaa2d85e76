"""Show an answer while the model writes it, and stop it on request (/stop, the Stop button).

A private chat gets a draft (`sendMessageDraft`) renewed at most every DRAFT_EVERY
seconds; a group, and a private chat whose Bot API server has no drafts, gets a message
edited at most every EDIT_EVERY seconds, with a Stop button under it. While tools run,
the draft or message shows one status line, never their output.

The final reply is not sent here: the outbox sends it, so it is stored and sent exactly
once like any reply. A draft simply gives way to it; the edited message becomes its first
part. Live updates are best effort and never hold the turn up: a 429 pauses them for
`retry_after` (PTB's rate limiter waits it out), a refused draft falls back to editing a
message, and a refused edit to the final message alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

from telegram import (
    Bot,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    ReplyParameters,
)
from telegram.constants import MessageLimit
from telegram.error import (
    BadRequest,
    ChatMigrated,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    RetryAfter,
    TelegramError,
)

from src.bot.chats import is_private
from src.bot.formatting import Part, reply_parts
from src.services.agent_service import TurnStream
from src.services.texts import status_line, t

logger = logging.getLogger(__name__)

DRAFT_EVERY = 0.4  # seconds between draft updates in one chat
EDIT_EVERY = 1.0  # seconds between edits of a live message in one chat
# A group's live message starts only after this long of writing: a quick answer is sent
# once, without a message that is edited a moment later.
FIRST_EDIT_AFTER = 1.0
# How long the final reply waits for a live update on its way: the first message's id is
# needed (or the final reply would come beside it); a draft or an edit is cancelled
# sooner (one already written to Telegram arrives before the final reply's request, and
# one still queued by the rate limiter is never sent).
FIRST_SEND_WAIT = 5.0
UPDATE_WAIT = 0.5
# The Stop button's callback data: this prefix and the update_id of the turn it stops,
# so that a button left under an old answer never stops the chat's next turn.
STOP_DATA = "stop:"


def stop_data(turn: int) -> str:
    """Return the callback data of the Stop button of a turn."""
    return f"{STOP_DATA}{turn}"


def stopped_turn(data: str | None) -> int | None:
    """Return the turn a Stop button's callback data names, or None if it is none's."""
    if not data or not data.startswith(STOP_DATA):
        return None
    turn = data.removeprefix(STOP_DATA)
    return int(turn) if turn.lstrip("-").isdigit() else None


def stop_button(lang: str | None, turn: int) -> InlineKeyboardMarkup:
    """The Stop button under a live message of a turn."""
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(t("stop_button", lang), callback_data=stop_data(turn))]]
    )


class LiveReply:
    """One turn's answer, shown while it is written; its `stream` goes to the turn.

    `turn`: the update_id of the message it answers (what its Stop button names)."""

    def __init__(
        self, bot: Bot, message: Message, turn: int, show: bool = True, fmt: str = "plain"
    ) -> None:
        self.bot = bot
        self.turn = turn
        self.fmt = fmt
        """How the answer is shown (TELEGRAM_REPLY_FORMAT): Markdown renders as it is written."""
        self.chat_id = message.chat_id
        self.thread_id = message.message_thread_id if message.is_topic_message else None
        self.private = is_private(message)
        self.reply_to = None if self.private else message.message_id
        self.asker = message.from_user.id if message.from_user else None
        self.lang = message.from_user.language_code if message.from_user else None
        self.mode = ("draft" if self.private else "edit") if show else "off"
        self.message_id: int | None = None
        """The live message (edit mode): the final reply's first part replaces it."""
        self.draft_id = secrets.randbelow(2**31 - 2**16) + 1
        self.calls = 0
        """Bot API calls made to show the answer live."""
        self.first_shown: float | None = None
        """When (loop time) the first text was visible."""
        self.stream = TurnStream(self._on_text, self._on_tools)
        self._text = ""
        self._tools: list[str] = []
        self._shown: tuple[Part, int] | None = None
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self._busy = False
        self._task: asyncio.Task[None] | None = None
        self._started: float | None = None
        self._last_call: float | None = None

    # --- what the turn reports ------------------------------------------------------------

    def _on_text(self, piece: str) -> None:
        self._text += piece
        self._tools = []
        self._changed.set()

    def _on_tools(self, names: list[str]) -> None:
        self._text, self._tools = "", names
        self._changed.set()

    def view(self) -> tuple[Part, int]:
        """Return what to show now and which part of the answer it is.

        A draft shows the part being written (a long answer continues in the next
        message); an edited message can only hold the first part.
        """
        parts = reply_parts(self._text, self.fmt, raw_if_empty=False) if self._text else []
        index = (len(parts) - 1 if self.mode == "draft" else 0) if parts else 0
        body = parts[index] if parts else Part("")
        if self._tools:
            # After the part's text: its entities' offsets stay right.
            text = f"{body.text}\n\n{status_line(self._tools, self.lang)}".strip()
            body = Part(text, body.entities)
        return Part(body.text[: MessageLimit.MAX_TEXT_LENGTH], body.entities), index

    # --- showing it -----------------------------------------------------------------------

    def start(self) -> None:
        """Begin showing what the turn writes."""
        self._started = asyncio.get_running_loop().time()
        if self.mode != "off":
            self._task = asyncio.create_task(self._run(), name=f"live-{self.chat_id}")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        await self._changed.wait()
        if self.mode == "edit" and await self._closing_within(FIRST_EDIT_AFTER):
            return
        next_at = 0.0
        while self.mode != "off" and not self._closed.is_set():
            await self._changed.wait()
            if await self._closing_within(next_at - loop.time()):
                return
            self._changed.clear()
            view, part = self.view()
            if not view.text or (view, part) == self._shown:
                continue
            await self._show(view, part)
            next_at = loop.time() + (DRAFT_EVERY if self.mode == "draft" else EDIT_EVERY)

    async def _closing_within(self, seconds: float) -> bool:
        """Wait `seconds`; tell whether the reply was finished meanwhile."""
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), seconds)
        return self._closed.is_set()

    async def _show(self, view: Part, part: int) -> None:
        self._busy = True
        try:
            await self._call(view, part)
        except RetryAfter as exc:
            # The rate limiter waited and retried already: let the next change try.
            logger.info("live reply in %s: flood limit (%s)", self.chat_id, exc)
            self._changed.set()
            return
        except (BadRequest, EndPointNotFound, InvalidToken) as exc:
            # PTB raises InvalidToken for a 404: here, a server without the method.
            if "not modified" in exc.message.lower():
                self._shown = (view, part)
                return
            self._fall_back(exc)
            return
        except (Forbidden, ChatMigrated) as exc:
            logger.info("live reply in %s refused: %s", self.chat_id, exc.message)
            self.mode = "off"
            return
        except TelegramError as exc:
            # A timeout or a 5xx: the next change tries again.
            logger.info("live reply in %s not shown: %s", self.chat_id, exc)
            return
        finally:
            self._busy = False
            self._last_call = asyncio.get_running_loop().time()
        self.calls += 1
        self._shown = (view, part)
        if self.first_shown is None:
            self.first_shown = asyncio.get_running_loop().time()

    async def _call(self, view: Part, part: int) -> None:
        entities = view.entities or None
        if self.mode == "draft":
            await self.bot.send_message_draft(
                self.chat_id,
                self.draft_id + part,
                view.text,
                message_thread_id=self.thread_id,
                entities=entities,
            )
        elif self.message_id is None:
            sent = await self.bot.send_message(
                self.chat_id,
                view.text,
                entities=entities,
                message_thread_id=self.thread_id,
                reply_parameters=self._quote(),
                reply_markup=stop_button(self.lang, self.turn),
            )
            self.message_id = sent.message_id
        else:
            await self.bot.edit_message_text(
                view.text,
                self.chat_id,
                self.message_id,
                entities=entities,
                reply_markup=stop_button(self.lang, self.turn),
            )

    def edit_at(self) -> float:
        """Return the loop time from which the live message may be edited again: the
        final reply's edit keeps the spacing of the live ones (EDIT_EVERY)."""
        return 0.0 if self._last_call is None else self._last_call + EDIT_EVERY

    def _in_flight_wait(self) -> float:
        if not self._busy:
            return 0.05  # nothing on its way: the task only waits for changes
        first = self.mode == "edit" and self.message_id is None
        return FIRST_SEND_WAIT if first else UPDATE_WAIT

    def _fall_back(self, exc: TelegramError) -> None:
        if self.mode == "draft":
            logger.info("drafts refused in %s (%s): editing a message", self.chat_id, exc.message)
            self.mode = "edit"
            self._changed.set()
        else:
            logger.info(
                "live edits refused in %s (%s): final reply only", self.chat_id, exc.message
            )
            self.mode = "off"

    def _quote(self) -> ReplyParameters | None:
        if self.reply_to is None:
            return None
        return ReplyParameters(self.reply_to, allow_sending_without_reply=True)

    async def finish(self) -> int | None:
        """Stop showing; return the live message the final reply replaces, if any."""
        self._closed.set()
        self._changed.set()
        task, self._task = self._task, None
        if task is not None:
            # An update on its way is waited for (see FIRST_SEND_WAIT); a pause is not.
            try:
                await asyncio.wait_for(asyncio.shield(task), self._in_flight_wait())
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            except Exception:
                logger.warning("live reply in %s failed", self.chat_id, exc_info=True)
        if self._started is not None and self.calls:
            first = (self.first_shown or self._started) - self._started
            logger.info(
                "live reply in %s: %s, first text after %.0f ms, %d call(s)",
                self.chat_id,
                self.mode,
                first * 1000,
                self.calls,
            )
        return self.message_id


class LiveTurns:
    """This process's live turns, by chat: what /stop and the Stop button stop."""

    def __init__(self) -> None:
        self._by_chat: dict[int, LiveReply] = {}

    def add(self, live: LiveReply) -> None:
        """Register a turn that has begun."""
        self._by_chat[live.chat_id] = live

    def remove(self, live: LiveReply) -> None:
        """Forget a turn that has ended."""
        if self._by_chat.get(live.chat_id) is live:
            del self._by_chat[live.chat_id]

    def stop(
        self,
        chat_id: int,
        user_id: int,
        admin: bool,
        turn: int | None = None,
        topic: int | None = None,
    ) -> str | None:
        """Stop the chat's live turn here (`turn`: only if it is that one; `topic`: only
        if it answers in that topic, 0 the General one); return "stopped", "not_yours" (a
        group member who neither asked nor administers), or None when no such turn of
        the chat runs here."""
        live = self._by_chat.get(chat_id)
        if live is None or turn not in (None, live.turn):
            return None
        if topic is not None and (live.thread_id or 0) != topic:
            return None  # /stop in one topic never stops another topic's answer
        if not (live.private or admin or live.asker in (None, user_id)):
            return "not_yours"
        live.stream.stop.set()
        return "stopped"
