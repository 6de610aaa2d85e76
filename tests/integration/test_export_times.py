"""/export's Markdown gives its times in the owner's zone, labelled (issue 40).

Before: it printed the stored UTC times unlabelled (`**user** #1, 2026-03-13 05:00`) beside
the message's own stamp in the owner's zone (`[Текущее время: 2026-03-13 14:00]`), and the
dates of previous conversations and of a fact's earlier values were UTC days.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from src.services.agent_service import Identity

KENJI = Identity(7_501_001, "kenji", "Kenji", "en")
TOKYO = ZoneInfo("Asia/Tokyo")
MINUTE = timedelta(minutes=1)
STAMP = re.compile(r"^\[[^\]]*: (\d{4}-\d\d-\d\d \d\d:\d\d Asia/Tokyo)\]")


def local(value: str) -> str:
    """A time of the export's JSON as the Markdown should show it."""
    return datetime.fromisoformat(value).astimezone(TOKYO).strftime("%Y-%m-%d %H:%M Asia/Tokyo")


async def test_the_markdown_times_are_the_owners_and_labelled(runtime_factory: Any) -> None:
    rt = await runtime_factory(timezone="Europe/Moscow")
    await rt.deps.users.set_timezone(KENJI.owner_id, "Asia/Tokyo")  # their /tz
    assert (await rt.service.handle_message(KENJI, "I'm moving to Osaka")).ok
    await rt.deps.memory.upsert_fact(KENJI.owner_id, "city", "Kyoto", "fact", 7)
    await rt.deps.memory.upsert_fact(KENJI.owner_id, "city", "Osaka", "fact", 7)
    await rt.deps.memory.add_compact(KENJI.owner_id, None, "Talked about moving.", [], "")

    as_json, as_markdown = await rt.service.export(KENJI)
    data, markdown = json.loads(as_json.data), as_markdown.data.decode()
    (conv,) = data["conversations"]
    first = conv["messages"][0]
    (compact,) = data["previous_conversations"]
    (city,) = [f for f in data["facts"] if f["key"] == "city"]

    assert f"\n{local(data['exported_at'])}\n" in markdown
    # A message's line gives the time its own stamp gives (stamped just before it was
    # stored: the same minute, or the one before), named the same way.
    stamped = STAMP.match(first["content"])
    assert stamped is not None
    stored = datetime.fromisoformat(first["created_at"])
    assert stamped.group(1) in {local(stored.isoformat()), local(str(stored - MINUTE))}
    assert f"**user** #1, {local(first['created_at'])}:" in markdown
    assert f"### {local(conv['created_at'])} ({conv['id']})" in markdown
    assert f"- {local(compact['created_at'])}: Talked about moving." in markdown
    assert f"was: Kyoto (until {local(city['history'][0]['until'])[:10]})" in markdown
    # No time is shown in UTC.
    utc = datetime.fromisoformat(first["created_at"]).strftime("%Y-%m-%d %H:%M")
    assert utc not in markdown
