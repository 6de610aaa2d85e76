"""Turn the bytes of a document a user sent (PDF, DOCX, plain text) into its text.

Everything here is synchronous CPU work on untrusted bytes: the bot runs it in a child
process with limits (src/media/sandbox.py), and it stops by itself at the text budget.
Whatever is wrong with a file comes out as a `DocumentError` whose `reason` the caller turns
into one sentence for the user; no other exception escapes for a bad file.
"""

from __future__ import annotations

import csv
import io
import lzma
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass
from typing import Literal

import docx
import docx.opc.exceptions
import lxml.etree
from charset_normalizer import from_bytes
from docx.table import Table
from pypdf import PdfReader
from pypdf.errors import DependencyError, PyPdfError

FORMATS = ("pdf", "docx", "txt", "md", "csv")

MIME_FORMATS = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "text/plain": "txt",
    "text/markdown": "md",
    "text/x-markdown": "md",
    "text/csv": "csv",
}

# A DOCX is a zip: refuse one that would unzip to more than this (a zip bomb).
MAX_DOCX_UNZIPPED = 100 * 1024 * 1024

# What pypdf raises on a malformed file besides its own errors: it parses untrusted
# structures with plain indexing, arithmetic and recursion.
PDF_FAILURES = (
    PyPdfError,
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
    AssertionError,
    ArithmeticError,
    RecursionError,
    struct.error,
    zlib.error,
)

# What python-docx raises on a zip that is not a Word document or whose XML is malformed;
# zipfile raises RuntimeError and NotImplementedError on encrypted or exotic entries, and
# its decompressors their own errors (bz2's is an OSError).
DOCX_FAILURES = (
    docx.opc.exceptions.PackageNotFoundError,
    zipfile.BadZipFile,
    RuntimeError,
    lxml.etree.LxmlError,
    ValueError,
    KeyError,
    EOFError,
    OSError,
    zlib.error,
    lzma.LZMAError,
)

# Word saves a password-protected DOCX not as a zip but as an OLE compound file holding
# an "EncryptionInfo" stream (its directory names are UTF-16).
OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
OLE_ENCRYPTION_INFO = "EncryptionInfo".encode("utf-16-le")

Reason = Literal["unsupported", "broken", "encrypted", "empty", "too_big", "too_heavy"]
"""`too_heavy`: reading it took more time or memory than the sandbox allows."""


@dataclass(frozen=True)
class TextBudget:
    """Where reading a document stops: what lies past it is never parsed."""

    pages: int = 300
    """PDF pages."""
    paragraphs: int = 100_000
    """DOCX paragraphs and tables."""
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


def document_format(file_name: str | None, mime_type: str | None) -> str | None:
    """The format by extension first, then by mime type; None when not supported."""
    _, dot, extension = (file_name or "").rpartition(".")
    if dot and extension.lower() in FORMATS:
        return extension.lower()
    return MIME_FORMATS.get((mime_type or "").split(";")[0].strip().lower())


def extract_text(
    data: bytes,
    file_name: str | None,
    mime_type: str | None = None,
    *,
    budget: TextBudget = TextBudget(),  # noqa: B008 - frozen, never changed
) -> Document:
    """Return the document's text up to the budget; raise `DocumentError` when there is
    none to be had."""
    match document_format(file_name, mime_type):
        case None:
            raise DocumentError("unsupported")
        case "pdf":
            return _pdf(data, budget)
        case "docx":
            return Document(_nonempty(_docx(data, budget)), "docx", None)
        case fmt:
            return Document(_nonempty(_plain(data, fmt)[: budget.chars]), fmt, None)


def _pdf(data: bytes, budget: TextBudget) -> Document:
    """Read the pages up to the budget, a blank line between pages."""
    texts: list[str] = []
    try:
        reader = PdfReader(io.BytesIO(data))
        # Many PDFs are encrypted only to restrict printing or copying: they open with "".
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentError("encrypted")
        count = len(reader.pages)
        chars = 0
        for i in range(min(count, budget.pages)):
            texts.append(reader.pages[i].extract_text())
            chars += len(texts[-1])
            if chars >= budget.chars:
                break
    except DependencyError as exc:
        # DependencyError: AES needs the `cryptography` package, which we do not ship.
        raise DocumentError("encrypted") from exc
    except PDF_FAILURES as exc:
        raise DocumentError("broken") from exc
    text = _nonempty("\n\n".join(texts)[: budget.chars])
    return Document(text, "pdf", count, truncated_pages=count - len(texts))


def _docx(data: bytes, budget: TextBudget) -> str:
    """Return the paragraphs and table rows in document order, a line each, up to the
    budget."""
    if data.startswith(OLE_SIGNATURE) and OLE_ENCRYPTION_INFO in data:
        raise DocumentError("encrypted")
    _check_unzipped_size(data)
    lines: list[str] = []
    try:
        document = docx.Document(io.BytesIO(data))
        chars = 0
        for block in document.iter_inner_content():
            lines.append(_table_text(block) if isinstance(block, Table) else block.text)
            chars += len(lines[-1]) + 1
            if chars >= budget.chars or len(lines) >= budget.paragraphs:
                break
    except DOCX_FAILURES as exc:
        raise DocumentError("broken") from exc
    return "\n".join(lines)[: budget.chars]


def _check_unzipped_size(data: bytes) -> None:
    """Refuse a zip whose directory declares more than `MAX_DOCX_UNZIPPED` bytes in all.

    The declared sizes are enough: zipfile never inflates an entry past its declared size.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unzipped = sum(entry.file_size for entry in archive.infolist())
    except (zipfile.BadZipFile, ValueError, EOFError, RuntimeError) as exc:
        raise DocumentError("broken") from exc
    if unzipped > MAX_DOCX_UNZIPPED:
        raise DocumentError("too_big")


def _table_text(table: Table) -> str:
    """Return the table's rows as lines of cells joined with " | "."""
    return "\n".join(" | ".join(cell.text for cell in row.cells) for row in table.rows)


def _plain(data: bytes, fmt: str) -> str:
    """Decode a text file whatever its encoding; a CSV becomes lines of "a | b | c"."""
    if not data.strip():
        raise DocumentError("empty")
    guess = from_bytes(data).best()
    text = None if guess is None else str(guess)
    # Binary data sometimes decodes "plausibly" into text full of control codes.
    if text is None or _looks_binary(text):
        raise DocumentError("broken")
    return _csv_lines(text) if fmt == "csv" else text


def _looks_binary(text: str) -> bool:
    """True when more than 1% of the text is control characters (NULs included).

    A stray NUL or two in real text is dropped by the tidy-up instead.
    """
    controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\f")
    return controls * 100 > len(text)


def _csv_lines(text: str) -> str:
    """Return the rows as lines of cells joined with " | "; the text as is if not a table."""
    try:
        dialect = csv.Sniffer().sniff(text[:65536], delimiters=",;\t|")
        rows = list(csv.reader(io.StringIO(text), dialect))
    except csv.Error:
        return text
    return "\n".join(" | ".join(cell.strip() for cell in row) for row in rows)


def _nonempty(text: str) -> str:
    """Return the text tidied; raise "empty" when nothing but whitespace is left."""
    tidied = _tidy(text)
    if not tidied:
        raise DocumentError("empty")
    return tidied


def _tidy(text: str) -> str:
    """Collapse runs of spaces, strip line ends, keep at most one blank line in a row.

    A line's indentation stays: in Markdown and plain text it carries code and list nesting.
    """
    text = text.replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n")
    lines = [_collapse_spaces(line) for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


def _collapse_spaces(line: str) -> str:
    """Return the line with inner runs of spaces and tabs made one space, the end stripped."""
    body = line.lstrip(" \t")
    indent = line[: len(line) - len(body)]
    return (indent + re.sub(r"[ \t]+", " ", body)).rstrip()
