"""What reading a document gives back (its text, or why there is none) and where it stops.

Apart from src/media/documents.py, which reads documents with heavy libraries (pypdf,
python-docx, openpyxl, python-pptx), so that the bot, which only waits for the sandbox's
child process, does not load them (nearly a second of CPU at every start).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Reason = Literal["unsupported", "broken", "encrypted", "empty", "too_big", "too_heavy"]
"""`too_heavy`: reading it took more time or memory than the sandbox allows."""


@dataclass(frozen=True)
class TextBudget:
    """Where reading a document stops: what lies past it is never parsed."""

    pages: int = 300
    """PDF pages."""
    paragraphs: int = 100_000
    """DOCX paragraphs and tables, XLSX rows, PPTX shapes."""
    chars: int = 4_000_000
    """Characters of text; the page or paragraph that reaches it is the last one read."""


@dataclass(frozen=True)
class Document:
    """A document's text and what the caller tells the user about it."""

    text: str
    """The extracted text, whitespace tidied; never empty."""
    format: str
    """One of `FORMATS`."""
    pages: int | None
    """A PDF's page count; None for the other formats."""
    truncated_pages: int = 0
    """PDF pages past the budget, not read."""


class DocumentError(Exception):
    """A document whose text cannot be had, and why."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason)
        self.reason: Reason = reason
