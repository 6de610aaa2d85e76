"""The inbox and outbox tables: deduplication, the deferred jobs, pruning."""

from __future__ import annotations

from typing import Any

from src.bot.formatting import Part, reply_parts
from src.bot.outbox import Outbox
from src.storage.delivery_repo import Delivery, DeliveryRepository
from src.storage.users_repo import UsersRepository


async def jobs(pool: Any) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT lock, args, status FROM procrastinate_jobs ORDER BY id")
        return list(await cur.fetchall())


async def test_updates_are_stored_once_each_with_one_job_per_update_in_order(pool: Any) -> None:
    repo = DeliveryRepository(pool)
    batch = [(12, 5, {"update_id": 12}), (11, 5, {"update_id": 11}), (13, -7, {"update_id": 13})]
    assert await repo.store_updates(batch, "q", "t") == [11, 12, 13]
    assert await repo.store_updates(batch + [(14, 5, {"update_id": 14})], "q", "t") == [14]
    assert [(j["lock"], j["args"]["update_id"]) for j in await jobs(pool)] == [
        ("chat:5", 11),
        ("chat:5", 12),
        ("chat:-7", 13),
        ("chat:5", 14),
    ]
    row = await repo.inbox_row(11)
    assert row is not None and row["payload"] == {"update_id": 11} and row["done_at"] is None


async def test_a_nul_in_an_update_survives_the_inbox(pool: Any) -> None:
    repo = DeliveryRepository(pool)
    payload = {"update_id": 1, "message": {"text": "\x00 и \ud800"}}
    await repo.store_updates([(1, 5, payload)], "q", "t")
    row = await repo.inbox_row(1)
    assert row is not None and row["payload"] == payload


async def test_prune_keeps_what_is_recent_or_still_to_send(pool: Any) -> None:
    repo = DeliveryRepository(pool)
    await repo.store_updates([(1, 5, {}), (2, 5, {}), (3, 5, {})], "q", "t")
    for update_id in (1, 2, 3):
        await repo.finish(update_id)
        await repo.add_reply(Delivery(update_id, 5), f"reply {update_id}")
    await repo.close(1, "sent")
    await repo.close(2, "sent")
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE inbox SET done_at = now() - interval '3 days' WHERE update_id IN (1, 3)"
        )
        await conn.execute(
            "UPDATE outbox SET created_at = now() - interval '3 days' WHERE update_id IN (1, 3)"
        )
    assert await repo.prune() == 1  # reply 1; reply 3 is still pending, reply 2 recent
    assert await repo.inbox_row(1) is None and await repo.inbox_row(3) is None
    assert await repo.inbox_row(2) is not None
    assert await repo.reply(1) is None
    assert await repo.reply(3) is not None and await repo.reply(2) is not None


async def test_a_reply_with_no_text_is_rejected_never_marked_sent(pool: Any) -> None:
    """Telegram refuses an empty text: a blank reply is not sent, nor marked `sent`, so the
    user is told (issue 41). Markdown that renders to nothing is sent as written."""
    repo, outbox = DeliveryRepository(pool), Outbox(DeliveryRepository(pool))
    await repo.store_updates([(1, 5, {}), (2, 5, {})], "q", "t")
    await repo.add_reply(Delivery(1, 5, fmt="markdown"), " \n\t ")
    reply = await repo.reply(1)
    assert reply is not None
    no_bot: Any = object()  # any call on it fails: nothing may be sent
    assert await outbox.deliver(no_bot, reply) == "rejected"
    stored = await repo.reply(1)
    assert stored is not None and (stored.status, stored.sent_ids) == ("rejected", [])
    assert reply_parts("```\n```", "markdown") == [Part("```\n```")]
    assert reply_parts("```\n```", "markdown", raw_if_empty=False) == []


async def test_a_reply_held_for_an_unreachable_chat_outlives_the_prune_until_it_writes(
    pool: Any,
) -> None:
    """While its chat is unreachable a reply is held (headed once), kept past the prune
    with its inbox row; the chat's next update clears the mark and sends it first."""
    repo, users = DeliveryRepository(pool), UsersRepository(pool)
    await users.get_or_create(5)
    await repo.store_updates([(-1, 5, {"task_run": {}})], "q", "t")
    await repo.add_reply(Delivery(-1, 5), "answer")
    await repo.finish(-1)
    reply = await repo.reply(-1)
    assert reply is not None
    assert not await repo.set_aside(reply, "held", "late: ")  # reachable: sent as usual
    assert await users.mark_unreachable(5) and not await users.mark_unreachable(5)
    assert await repo.set_aside(reply, "held", "late: ")
    assert await repo.set_aside(reply, "held", "late: ")  # headed once
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE inbox SET done_at = now() - interval '3 days' WHERE update_id = -1"
        )
        await conn.execute(
            "UPDATE outbox SET created_at = now() - interval '3 days' WHERE update_id = -1"
        )
    assert await repo.prune() == 0
    held = await repo.reply(-1)
    assert held is not None and (held.status, held.text) == ("held", "late: answer")

    # An update not stored (ignored, a button) from another chat changes nothing.
    await repo.store_updates([], "q", "t", present=[6])
    still = await repo.reply(-1)
    assert still is not None and still.status == "held"
    await repo.store_updates([(7, 5, {})], "q", "t", present=[5])
    released = await repo.reply(-1)
    assert released is not None and released.status == "pending"
    row = await repo.inbox_row(-1)
    assert row is not None and row["done_at"] is None
    assert (await users.get(5) or {})["unreachable_since"] is None
    assert [j["args"]["update_id"] for j in await jobs(pool)][-2:] == [-1, 7]
