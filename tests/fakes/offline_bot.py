"""A Bot API client side with no network: PTB's request class answered from memory.

Unit tests run the real Application with it; the fake Bot API server's helpers build the
updates (without starting the server) and answer getChatMember by the server's rules.
"""

from __future__ import annotations

import json
import time
from typing import Any

from telegram import Update
from telegram.error import NetworkError
from telegram.request import BaseRequest, RequestData

from tests.fakes.bot_api_server import FakeBotAPI

TOKEN = "123456:TEST-TOKEN"
BOT_USER = {"id": 999, "is_bot": True, "first_name": "Bot", "username": "tgagent_test_bot"}


class OfflineRequest(BaseRequest):
    """Answer a few Bot API methods locally and record them; refuse everything else.

    getChatMember is answered by the fake Bot API's rules, from the updates it built.
    """

    def __init__(self, telegram: FakeBotAPI | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.telegram = telegram  # who is in which chat, for getChatMember

    @property
    def read_timeout(self) -> float | None:
        return 1.0

    async def initialize(self) -> None:
        pass

    async def shutdown(self) -> None:
        pass

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> tuple[int, bytes]:
        name = url.rsplit("/", 1)[-1]
        params = dict(request_data.parameters) if request_data else {}
        self.calls.append((name, params))
        result: Any
        if name == "getMe":
            result = BOT_USER
        elif name == "sendMessage":
            chat = {"id": params["chat_id"], "type": "private"}
            result = {"message_id": len(self.calls), "date": int(time.time()), "chat": chat}
            result |= {"text": params["text"], "from": BOT_USER}
        elif name == "sendChatAction":
            result = True
        elif name == "getChatMember" and self.telegram is not None:
            status, body = self.telegram.chat_member(params)
            return status, json.dumps(body).encode()
        else:
            raise NetworkError(f"offline: {name} would need the network")
        return 200, json.dumps({"ok": True, "result": result}).encode()

    def texts(self) -> list[str]:
        return [p["text"] for name, p in self.calls if name == "sendMessage"]


async def feed(app: Any, factory: FakeBotAPI) -> None:
    """Process the update the factory built last."""
    await app.process_update(Update.de_json(factory.updates[-1], app.bot))
