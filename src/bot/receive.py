"""The receiving side: updates from long polling or a webhook, stored before Telegram is
told they arrived.

Polling asks for the next updates (which acknowledges the previous ones) only after the
previous batch is stored; a webhook answers 200 only after the update is stored, and 500
when it could not be (Telegram then sends it again). The gate (`admission`) runs first:
what it refuses is never stored, and refused users hear why.

The gate's verdict is a fact about an update: it is decided once per `update_id` (its
rate-limit charge too) and kept until the update is stored, so retries of a batch the
database refused neither charge the sender again nor answer, stop or press twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections import Counter
from collections.abc import Coroutine
from typing import Any
from urllib.parse import urlsplit

from telegram import CallbackQuery, Message, Update
from telegram.error import Conflict, InvalidToken, NetworkError, RetryAfter, TelegramError, TimedOut

from src.bot.chats import (
    broken_invariant,
    command_name,
    is_anonymous_admin,
    migration_of,
    topic_of,
)
from src.bot.commands import (
    MODEL_DATA,
    lang_of_message,
    model_pressed,
    request_stop,
    say,
)
from src.bot.data_commands import ERASE_DATA, erase_pressed
from src.bot.handlers import ACCEPT, IGNORE, Verdict, admission
from src.bot.live import stopped_turn
from src.bot.memory_commands import memory_pressed
from src.bot.memory_view import MEMORY_DATA
from src.bot.queue import QUEUE, TASK
from src.bot.state import BotState
from src.bot.task_commands import TASK_DATA, task_pressed
from src.config import WEBHOOK_SECRET_MISSING, ConfigError
from src.services.texts import t

logger = logging.getLogger(__name__)

# Only what the handlers deal with; edits and channel posts are answered with silence, and
# callback queries are the presses of the Stop, /model and /memory buttons.
ALLOWED_UPDATES = [
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "callback_query",
]
POLL_TIMEOUT = 10  # seconds Telegram holds a getUpdates call open when nothing comes
# Pauses after failures to fetch or to store (the database is restarting...).
RETRY_AFTER = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)
# How long an admitted album (media group) admits its other items: they come within
# seconds, and in a group only the captioned one mentions the bot.
ALBUM_SECONDS = 60.0
# Verdicts kept for updates not stored yet (a long outage under a webhook): the oldest
# beyond this are forgotten, and decided again if Telegram sends them again.
KEEP_VERDICTS = 10_000
# The reason `Receiver.refused` counts an update under when it breaks Telegram's invariants.
FORGED = "forged"


def chat_id_of(update: Update) -> int | None:
    """Return the chat an update belongs to (its jobs run in order per chat). A group's
    upgrade is the supergroup's: its messages after the upgrade wait for the move."""
    moved = migration_of(update)
    if moved is not None:
        return moved[1]
    chat = update.effective_chat
    return chat.id if chat is not None else None


class Receiver:
    """Admit updates, store them with their jobs, and answer the refused ones."""

    def __init__(self, app: Any, state: BotState) -> None:
        self.app = app
        self.state = state
        self.receiving = asyncio.Event()
        self._answers: set[asyncio.Task[None]] = set()
        self._albums: dict[tuple[int, int, str], float] = {}
        """Albums admitted lately, (chat, sender, media_group_id) -> when."""
        self._decided: dict[int, bool] = {}
        """update_id -> whether it goes to the inbox, for updates not stored yet."""
        self.refused: Counter[str] = Counter()
        """Updates refused before the gate since start, by reason (`FORGED`)."""

    async def accept(self, raw: list[dict[str, Any]]) -> int:
        """Store the updates the gate admits; return how many were new. Raises when the
        database refuses them: the caller must not acknowledge them then."""
        kept: list[tuple[int, int | None, dict[str, Any]]] = []
        seen: list[int] = []
        present: list[int] = []
        for data in raw:
            update = Update.de_json(data, self.app.bot)
            seen.append(update.update_id)
            store = self._decided.get(update.update_id)
            if store is None:
                store = self._decided[update.update_id] = self._first_sight(update)
            chat = chat_id_of(update)
            if store:
                kept.append((update.update_id, chat, data))
            if chat is not None and (store or broken_invariant(update) is None):
                present.append(chat)  # it writes: it can be reached again
        while len(self._decided) > KEEP_VERDICTS:
            del self._decided[next(iter(self._decided))]
        new = await self.state.service.deps.delivery.store_updates(
            kept, QUEUE, TASK, present=present
        )
        for update_id in seen:
            self._decided.pop(update_id, None)
        if len(new) < len(kept):
            logger.info("%d update(s) received again: ignored", len(kept) - len(new))
        return len(new)

    def _first_sight(self, update: Update) -> bool:
        """Decide an update's fate once: run the gate (charging the sender's rate limit),
        answer a refusal, run /stop or a button press; return whether to store it."""
        broken = broken_invariant(update)
        if broken is not None:
            # Neither stored nor answered: it would run a turn on another chat's memory
            # (a private chat called a group, a group's upgrade onto a user's id...).
            self.refused[FORGED] += 1
            logger.warning("update %s refused: %s", update.update_id, broken)
            return False
        if update.callback_query is not None:
            self._later(self._pressed(update.callback_query))
            return False
        if migration_of(update) is not None:
            return True  # stored: its job moves the group (src/bot/queue.py)
        verdict = self._admit(update)
        if verdict.accept and update.message and command_name(update.message) == "stop":
            # Not queued: behind the chat's running turn, it would come after it.
            self._later(self._stop(update.message))
            return False
        if not verdict.accept and verdict.answer is not None and update.message is not None:
            self._later(self._say(update, verdict.answer))
        return verdict.accept

    def _admit(self, update: Update) -> Verdict:
        """Run the gate; the other items of an album it admitted go with it.

        They are not counted against the sender's rate limit again (an album is one
        message to its sender), and in a group they need no mention of their own.
        """
        message = update.message
        album = None
        if message is not None and message.media_group_id and message.from_user is not None:
            album = (message.chat_id, message.from_user.id, message.media_group_id)
        now = time.monotonic()
        known = album is not None and now - self._albums.get(album, -ALBUM_SECONDS) < ALBUM_SECONDS
        verdict = admission(update, self.app.bot, self.state, count=not known)
        if known and verdict == IGNORE:
            verdict = ACCEPT  # in a group, only the captioned item mentions the bot
        if album is not None and verdict.accept:
            self._albums = {k: v for k, v in self._albums.items() if now - v < ALBUM_SECONDS}
            self._albums[album] = now
        return verdict

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        """Answer without holding up the updates behind this one."""
        task = asyncio.create_task(work)
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)

    async def _stop(self, message: Message) -> None:
        """/stop: end the chat's running turn in the message's topic, in whichever
        process runs it."""
        bot, lang = self.app.bot, lang_of_message(message)
        try:
            result = await request_stop(
                self.state,
                bot,
                message.chat_id,
                message.from_user,
                is_anonymous_admin(message),
                topic=topic_of(message),
            )
            if result != "stopped":
                key = "stop_not_yours" if result == "not_yours" else "nothing_to_stop"
                await say(message, t(key, lang))
        except Exception:
            logger.warning("/stop in chat %s failed", message.chat_id, exc_info=True)

    async def _pressed(self, query: CallbackQuery) -> None:
        """A press of the Stop button under a live message, or of a /model or /memory
        button."""
        user, lang = query.from_user, query.from_user.language_code
        chat = query.message.chat if query.message is not None else None
        try:
            if chat is None or not self.state.access.allows(user.id, chat.id):
                await query.answer(t("not_allowed", lang) if chat is not None else None)
                return
            if (query.data or "").startswith(MODEL_DATA):
                await model_pressed(self.state, self.app.bot, query)
                return
            if (query.data or "").startswith(MEMORY_DATA):
                await memory_pressed(self.state, self.app.bot, query)
                return
            if (query.data or "").startswith(TASK_DATA):
                await task_pressed(self.state, self.app.bot, query)
                return
            if query.data == ERASE_DATA:
                await erase_pressed(self.state, self.app.bot, query)
                return
            turn = stopped_turn(query.data)
            if turn is None:
                await query.answer()
                return
            result = await request_stop(self.state, self.app.bot, chat.id, user, turn=turn)
            key = {"stopped": "stopped", "not_yours": "stop_not_yours"}.get(
                result, "nothing_to_stop"
            )
            await query.answer(t(key, lang))
        except Exception:
            logger.warning("a Stop press in chat %s failed", chat and chat.id, exc_info=True)

    @staticmethod
    async def _say(update: Update, text: str) -> None:
        assert update.message is not None
        try:
            await say(update.message, text)
        except TelegramError as exc:
            logger.info("could not answer a refused update %s: %s", update.update_id, exc)

    async def close(self) -> None:
        """Wait for the answers to refused updates still being sent."""
        if self.refused[FORGED]:
            logger.warning(
                "%d update(s) breaking Telegram's invariants refused since start",
                self.refused[FORGED],
            )
        if self._answers:
            await asyncio.gather(*self._answers, return_exceptions=True)

    # --- long polling ------------------------------------------------------------------

    async def poll(self, stop: asyncio.Event) -> None:
        """Fetch updates until `stop`; store each batch before asking for the next."""
        bot = self.app.bot
        await bot.delete_webhook()
        offset = 0
        failures = 0
        logger.info("polling for updates")
        while not stop.is_set():
            self.receiving.set()
            try:
                updates = await _until(
                    stop,
                    bot.get_updates(
                        offset=offset, timeout=POLL_TIMEOUT, allowed_updates=ALLOWED_UPDATES
                    ),
                )
            except TimedOut:
                continue  # a long poll that outlived its read timeout: ask again
            except InvalidToken:
                raise
            except RetryAfter as exc:
                await _pause(stop, _seconds(exc.retry_after))
                continue
            except (NetworkError, Conflict) as exc:
                pause = RETRY_AFTER[min(failures, len(RETRY_AFTER) - 1)]
                failures += 1
                logger.warning("getUpdates failed (%s): again in %.1f s", exc, pause)
                await _pause(stop, pause)
                continue
            if updates is None:  # stopped while waiting
                break
            failures = 0
            if not updates:
                continue
            if not await self._store_until_done([u.to_dict() for u in updates], stop):
                break  # stopped before they were stored: Telegram sends them again
            offset = updates[-1].update_id + 1
        self.receiving.clear()

    async def _store_until_done(self, raw: list[dict[str, Any]], stop: asyncio.Event) -> bool:
        failures = 0
        while not stop.is_set():
            try:
                await self.accept(raw)
                return True
            except Exception:
                pause = RETRY_AFTER[min(failures, len(RETRY_AFTER) - 1)]
                failures += 1
                logger.error("could not store %d update(s): again in %.1f s", len(raw), pause)
                await _pause(stop, pause)
        return False

    # --- webhook ------------------------------------------------------------------------

    async def serve_webhook(self, stop: asyncio.Event) -> None:
        """Serve the webhook until `stop`: 200 once an update is stored, 500 if it could
        not be (Telegram retries), 403 without the secret token. Refuses to start without
        WEBHOOK_SECRET_TOKEN: anyone who found the URL could act as any user."""
        import tornado.httpserver
        import tornado.web

        settings = self.state.settings
        assert settings.webhook_url
        if settings.webhook_secret_token is None:
            raise ConfigError(WEBHOOK_SECRET_MISSING)
        secret = settings.webhook_secret_token.get_secret_value().encode()
        receiver = self

        class Hook(tornado.web.RequestHandler):
            async def post(self) -> None:
                given = self.request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
                # In constant time: how long a refusal takes says nothing of the secret.
                if not hmac.compare_digest(given.encode(), secret):
                    self.set_status(403)
                    return
                try:
                    data = json.loads(self.request.body)
                except ValueError:
                    self.set_status(400)
                    return
                if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
                    self.set_status(400)
                    return
                try:
                    await receiver.accept([data])
                except Exception:
                    logger.error("could not store update %s: 500", data["update_id"])
                    self.set_status(500)
                    return
                self.set_status(200)

        path = "/" + urlsplit(settings.webhook_url).path.lstrip("/")
        server = tornado.httpserver.HTTPServer(tornado.web.Application([(path, Hook)]))
        server.listen(settings.webhook_port, settings.webhook_listen)
        try:
            await self.app.bot.set_webhook(
                settings.webhook_url,
                secret_token=secret.decode(),
                allowed_updates=ALLOWED_UPDATES,
            )
            logger.info(
                "webhook on %s:%d for %s",
                settings.webhook_listen,
                settings.webhook_port,
                urlsplit(settings.webhook_url).netloc,
            )
            self.receiving.set()
            await stop.wait()
        finally:
            self.receiving.clear()
            server.stop()
            await server.close_all_connections()


def _seconds(value: Any) -> float:
    return float(value if isinstance(value, int | float) else value.total_seconds())


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _until(stop: asyncio.Event, call: Any) -> Any:
    """Await `call` unless `stop` comes first (then cancel it and return None)."""
    task = asyncio.ensure_future(call)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, TelegramError):
        await task
    return None
