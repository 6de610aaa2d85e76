"""Background jobs serve only owners the current allowlist admits (issue 16).

A user who chatted and was then removed from ALLOWED_USER_IDS gets no reminder, and the
idle-compaction job neither compacts their session nor extracts facts from it: no model
call, no write. Their conversations never fill a batch that admitted owners wait behind.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from src.services.agent_service import Identity
from src.services.reminders import ReminderService

COMPACT = "compact-model"
KEPT = Identity(6601, "kept", "Kept", "ru")
REMOVED = Identity(6602, "removed", "Removed", "ru")


def admitted(owner: int) -> bool:
    return owner != REMOVED.owner_id


async def chat(rt: Any, identity: Identity, text: str) -> None:
    assert (await rt.service.handle_message(identity, text)).ok
    await rt.service.drain()


async def test_idle_compaction_skips_removed_owners(runtime_factory: Any, llm: Any) -> None:
    rt = await runtime_factory(compact_model=COMPACT, session_idle_minutes=30)
    await chat(rt, REMOVED, "Меня зовут Рома, я люблю шахматы")  # the older one: first in line
    await chat(rt, KEPT, "Меня зовут Катя, я люблю чай")
    removed_conv = await rt.deps.conversations.get_or_create_conversation(REMOVED.owner_id)
    calls_before = len(llm.requests)
    later = datetime.now(UTC) + timedelta(minutes=31)

    # limit=1: the removed owner's conversation, oldest, must not take the only place.
    assert await rt.service.compact_idle_sessions(later, limit=1, admits=admitted) == 1
    assert await rt.service.compact_idle_sessions(later, limit=1, admits=admitted) == 0
    assert len(await rt.deps.memory.list_compacts(KEPT.owner_id)) == 1
    assert await rt.deps.memory.list_compacts(REMOVED.owner_id) == []
    assert (await rt.deps.conversations.get_conversation(removed_conv))["ended_at"] is None
    # No model call about them: neither their compact nor their facts.
    prompts = " ".join(str(r["messages"]) for r in llm.requests[calls_before:])
    assert "Катя" in prompts and "Рома" not in prompts

    # Back on the allowlist: the job serves them again.
    assert await rt.service.compact_idle_sessions(later) == 1
    assert len(await rt.deps.memory.list_compacts(REMOVED.owner_id)) == 1


async def test_reminders_skip_removed_users(runtime_factory: Any, llm: Any, pool: Any) -> None:
    rt = await runtime_factory(remind_after_hours=1)
    for identity in (REMOVED, KEPT):
        await chat(rt, identity, "привет")
    async with pool.connection() as conn:
        await conn.execute("UPDATE users SET last_seen_at = now() - interval '2 hours'")
    reminders = ReminderService(rt.deps, rt.service.locks)
    sent: list[int] = []

    async def send(chat_id: int, text: str) -> None:
        sent.append(chat_id)

    chat_calls = len(llm.requests)
    stats = await reminders.run_once(send, admits=admitted)
    assert (stats.due, stats.refused) == (2, 1) and stats.sent + stats.templates == 1
    assert sent == [KEPT.owner_id]
    assert len(llm.requests) == chat_calls + 1  # nothing written for the removed user
    assert (await reminders.run_once(send, admits=admitted)).due == 0  # not due again
    assert sent == [KEPT.owner_id]


async def test_two_processes_reminding_at_once_send_one_reminder(
    runtime_factory: Any, llm: Any, pool: Any
) -> None:
    """`tgagent bot` and a `tgagent worker` both run the reminder job: the user due in
    both runs is reminded once."""
    rt = await runtime_factory(remind_after_hours=1)
    other = await runtime_factory(remind_after_hours=1)
    await chat(rt, KEPT, "привет")
    async with pool.connection() as conn:
        await conn.execute("UPDATE users SET last_seen_at = now() - interval '2 hours'")
    sent: list[int] = []

    async def send(chat_id: int, text: str) -> None:
        sent.append(chat_id)

    one = ReminderService(rt.deps, rt.service.locks)
    two = ReminderService(other.deps, other.service.locks)
    first, second = await asyncio.gather(one.run_once(send), two.run_once(send))
    assert first.due == second.due == 1  # both found the user due
    assert sent == [KEPT.owner_id]
    assert first.skipped + second.skipped == 1
