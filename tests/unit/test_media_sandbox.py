"""Untrusted documents are read in a child process: limits end hostile files, good ones read
whole, a cancelled read kills its child, and a file a limit stopped is not read again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from src.media.documents import DocumentError, TextBudget
from src.media.sandbox import Limits, Sandbox, read_document
from tests.e2e.conftest import until
from tests.media_files import (
    child_pids,
    docx_bytes,
    empty_paragraphs_docx_bytes,
    hostile_pdf_bytes,
    pdf_bytes,
)

# Tight limits: the hostile files need an hour and gigabytes without them.
LIMITS = Limits(seconds=4.0, memory_mb=384, budget=TextBudget(chars=100_000))
# A file that reads whole gets time enough on a loaded machine (a child's start alone may
# take seconds there): only the hostile files must meet the tight deadline.
AMPLE = Limits(seconds=60.0, memory_mb=LIMITS.memory_mb, budget=LIMITS.budget)
PAGE = " ".join(["The committee reviewed the budget and approved the plan."] * 30)


async def test_a_pdf_of_pages_sharing_one_huge_stream_ends_at_the_deadline() -> None:
    pdf = hostile_pdf_bytes()
    assert len(pdf) < 100_000  # 300 pages of ~15 s each without the sandbox
    outcome = await read_document(pdf, "hostile.pdf", None, LIMITS)
    assert outcome.error == "too_heavy" and outcome.document is None


async def test_a_docx_of_millions_of_empty_paragraphs_ends_at_the_memory_limit() -> None:
    docx = empty_paragraphs_docx_bytes(16_000_000)
    assert len(docx) < 300_000  # and it unzips to less than MAX_DOCX_UNZIPPED
    outcome = await read_document(docx, "hostile.docx", None, LIMITS)
    assert outcome.error == "too_heavy"
    assert outcome.peak_mb <= LIMITS.memory_mb


async def test_a_docx_of_many_empty_paragraphs_stops_at_the_paragraph_budget() -> None:
    docx = empty_paragraphs_docx_bytes(300_000)
    budget = TextBudget(paragraphs=1000)
    outcome = await read_document(
        docx, "many.docx", None, Limits(LIMITS.seconds * 5, LIMITS.memory_mb, budget)
    )
    assert outcome.error == "empty"  # ended by the budget, not by a limit


async def test_a_normal_fifty_page_pdf_reads_whole() -> None:
    outcome = await read_document(pdf_bytes([PAGE] * 50), "report.pdf", None, AMPLE)
    assert outcome.error is None and outcome.document is not None
    document = outcome.document
    assert (document.pages, document.truncated_pages) == (50, 0)
    assert document.text == "\n\n".join([PAGE] * 50)


async def test_the_text_budget_stops_reading_and_says_how_many_pages_were_left() -> None:
    pages = [f"Page {i}. {PAGE}" for i in range(40)]
    budget = TextBudget(chars=len(PAGE) * 3)
    outcome = await read_document(
        pdf_bytes(pages), "long.pdf", None, Limits(AMPLE.seconds, LIMITS.memory_mb, budget)
    )
    assert outcome.document is not None
    text = outcome.document.text
    assert text.startswith("Page 0.") and "Page 2." in text and "Page 3." not in text
    assert budget.chars - 5 <= len(text) <= budget.chars  # cut there (trailing space tidied)
    assert (outcome.document.pages, outcome.document.truncated_pages) == (40, 37)


async def test_other_refusals_come_back_as_their_reasons() -> None:
    outcome = await read_document(b"PK\x03\x04 nope", "a.docx", None, AMPLE)
    assert outcome.error == "broken"
    read = await read_document(docx_bytes(["Hello", "World"]), "a.docx", None, AMPLE)
    assert read.document is not None and read.document.text == "Hello\nWorld"


async def test_a_cancelled_read_kills_its_child() -> None:
    before = child_pids()
    task = asyncio.create_task(read_document(hostile_pdf_bytes(), "h.pdf", None, LIMITS))
    await until(lambda: len(child_pids() - before) == 1)
    (child,) = child_pids() - before
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not Path(f"/proc/{child}").exists()  # killed and reaped before the task ended


async def test_a_document_a_limit_stopped_is_never_read_again() -> None:
    sandbox = Sandbox(LIMITS.seconds, LIMITS.memory_mb)
    pdf = hostile_pdf_bytes()
    for _ in range(2):
        with pytest.raises(DocumentError) as refused:
            await sandbox.read(pdf, "hostile.pdf", None, LIMITS.budget)
        assert refused.value.reason == "too_heavy"
    assert sandbox.children == 1  # the second time, refused without reading
    good = await sandbox.read(pdf_bytes(["Fine"]), "fine.pdf", None, LIMITS.budget)
    assert good.text == "Fine" and sandbox.children == 2
