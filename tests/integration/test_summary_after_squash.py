"""The summarizer and a compression together: a squash summary row has a new id but an
early position, and must not make in-window messages look like overflow."""

from __future__ import annotations

from typing import Any

from src.graph.context.render import row_tokens
from src.graph.memory.summarizer import summary_limits, window_rows, window_rule
from src.graph.memory.window import due
from src.storage.squash_repo import SquashRepository


async def test_overflow_excludes_messages_after_an_early_summary_row(
    runtime_factory: Any,
) -> None:
    rt = await runtime_factory(max_context=5, summary_trigger=2)
    repo = rt.deps.conversations
    conv = await repo.get_or_create_conversation(8080)
    rows = [await repo.append_message(conv, "user", f"m{i}") for i in range(10)]
    # Squash m4..m5: the summary row gets the largest id but stands at m4's place.
    await SquashRepository(rt.pool).squash(conv, [rows[4]["id"], rows[5]["id"]], "S45", "model")
    window = await repo.load_last_messages(conv, 5)
    assert [r["content"] for r in window] == ["S45", "m6", "m7", "m8", "m9"]
    _, size, rows = await window_rows(rt.deps, 8080, conv)
    rule = window_rule(rt.settings, size, summary_limits(rt.settings))
    # Folded ahead: everything older than the newest `keep` (5 - 2 * 1 = 3) messages.
    overflow = due(rows, rule, lambda r: row_tokens(r, rt.deps.counter))
    assert [r["content"] for r in overflow] == ["m0", "m1", "m2", "m3", "S45", "m6"]
