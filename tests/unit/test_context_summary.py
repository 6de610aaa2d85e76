"""The running summary in the prompt: cut to its room, it keeps its newest part and says so."""

from __future__ import annotations

from src.graph import prompts
from src.graph.context.budget import Layers
from src.graph.context.sections import system_sections
from src.graph.memory.summarizer import summary_limits
from src.graph.tokens import ApproxCounter
from tests.unit.test_context import compact, settings, state

COUNTER = ApproxCounter()


def test_a_full_summary_beside_full_previous_conversations_keeps_its_newest_part() -> None:
    """Before: with previous conversations filling their third, a summary as long as the
    summarizer stores was cut keeping its start, so the sentences folded last (which had
    just left the window) were in neither the window nor the prompt."""
    s = settings()
    layers = Layers.for_model(s, s.llm_model)
    most = summary_limits(s).summary
    summary, i = "", 0
    while COUNTER.count(longer := f"{summary} Point {i}: the user decided {i}.".strip()) <= most:
        summary, i = longer, i + 1
    newest = f"Point {i - 1}: the user decided {i - 1}."
    long_notes = [compact(n) | {"summary": "We talked about the garden. " * 40} for n in range(5)]
    sections = system_sections(state(summary=summary, compacts=long_notes), layers, COUNTER, s)
    assert COUNTER.count(sections["previous"]) >= layers.summary // 3 - 20  # its third, full
    assert sections["summary"].endswith(newest)
    assert sections["summary"].startswith(f"{prompts.SUMMARY_HEADER}\n{prompts.SUMMARY_CUT_LINE}")
    layer = sections["previous"] + "\n\n" + sections["summary"]
    assert COUNTER.count(layer) <= layers.summary
    # Without previous conversations it fits whole, and nothing says it was cut.
    alone = system_sections(state(summary=summary), layers, COUNTER, s)["summary"]
    assert alone == f"{prompts.SUMMARY_HEADER}\n{summary}"
