"""The summarizer and a compression together: a squash summary row has a new id but an
early position, and must not make in-window messages look like overflow; a squash of
messages the summary partly holds must not fold them twice."""

from __future__ import annotations

from typing import Any

from src.graph import prompts
from src.graph.context.render import row_tokens
from src.graph.memory.summarizer import Fold, summary_limits, window_rows, window_rule
from src.graph.memory.window import due
from src.storage.squash_repo import SquashRepository
from tests.fakes.memory_model import MEMORY_MODEL, section, transcript
from tests.fakes.openai_server import message_text


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


def folded_texts(llm: Any) -> list[str]:
    """Return every message text the summarizer was given to fold, in order."""
    texts = []
    for request in llm.requests_for(MEMORY_MODEL):
        if message_text(request["messages"][0]) != prompts.SUMMARIZER_SYSTEM:
            continue
        prompt = message_text(request["messages"][-1])
        texts += [text for _, text in transcript(section(prompt, "New messages:\n", "\n\nRules:"))]
    return texts


async def test_a_squash_over_the_fold_edge_reaches_the_summary_once(
    runtime_factory: Any, llm: Any
) -> None:
    """A squash of messages some of which the running summary holds already: the summary
    later reads only the others (the originals), never the squash summary that repeats
    what it holds; a squash of that squash likewise. Each message is folded once."""
    rt = await runtime_factory(max_context=30)
    repo, squashes = rt.deps.conversations, SquashRepository(rt.pool)
    owner = 8082
    conv = await repo.get_or_create_conversation(owner)
    rows = [await repo.append_message(conv, "user", f"m{i}") for i in range(8)]
    fold = Fold(rt.deps, conv, owner, summary_limits(rt.settings))
    summary, done = await fold.rows("", rows[:3])
    assert done == 3
    # m1, m2 are in the summary; m3, m4 are not.
    first = await squashes.squash(conv, [r["id"] for r in rows[1:5]], "S1", "model")
    assert first.summary["summarized"] is False
    # A squash of that squash and m5, all unfolded: still read as m3, m4, m5.
    second = await squashes.squash(conv, [first.summary["id"], rows[5]["id"]], "S2", "model")
    pending = await repo.unsummarized(conv, 10)
    assert [r["content"] for r in pending] == ["S2", "m6", "m7"]
    summary, done = await fold.rows(summary, pending)
    assert done == 3 and not await repo.unsummarized(conv, 10)
    assert sorted(folded_texts(llm)) == [f"m{i}" for i in range(8)]
    assert second.summary["id"] in {r["id"] for r in await repo.load_last_messages(conv, 5)}
