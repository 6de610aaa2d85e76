"""Turn the bytes of a document a user sent into its text: PDF, Word (DOCX), Excel (XLSX),
PowerPoint (PPTX), and any text file (JSON, code, logs, YAML, XML, HTML...), which is known
by its content (its name may say nothing, or lie).

Everything here is synchronous CPU work on untrusted bytes: the bot runs it in a child
process with limits (src/media/sandbox.py), and it stops by itself at the text budget.
Whatever is wrong with a file comes out as a `DocumentError` whose `reason` the caller turns
into one sentence for the user; no other exception escapes for a bad file.
"""

from __future__ import annotations

import codecs
import csv
import io
import lzma
import re
import struct
import zipfile
import zlib
from datetime import datetime, time

import docx
import docx.opc.exceptions
import lxml.etree
import openpyxl
import pptx
import pptx.exc
from charset_normalizer import from_bytes
from docx.table import Table
from openpyxl.utils.exceptions import InvalidFileException
from pptx.shapes.autoshape import Shape
from pptx.shapes.base import BaseShape
from pptx.shapes.graphfrm import GraphicFrame
from pptx.shapes.group import GroupShape
from pypdf import PdfReader
from pypdf.errors import DependencyError, PyPdfError

from src.media.document_types import Document, DocumentError, TextBudget

# "txt": any text file, whatever its name says; "md" and "csv" are text read as such.
FORMATS = ("pdf", "docx", "xlsx", "pptx", "txt", "md", "csv")
OFFICE = ("docx", "xlsx", "pptx")

MIME_FORMATS = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "text/plain": "txt",
    "text/markdown": "md",
    "text/x-markdown": "md",
    "text/csv": "csv",
}
# Names that say "text": a file so named that is not text is damaged, not of another kind.
EXTENSIONS = {"txt": "txt", "text": "txt", "md": "md", "markdown": "md", "csv": "csv", "tsv": "csv"}

# DOCX, XLSX and PPTX are zips: refuse one that would unzip to more than this (a zip bomb).
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

# What openpyxl and python-pptx raise on a zip that is not their document or whose XML is
# malformed, besides what python-docx's zip and XML handling raise.
OFFICE_FAILURES = (
    *DOCX_FAILURES,
    InvalidFileException,
    pptx.exc.PythonPptxError,
    TypeError,
    AttributeError,
    IndexError,
)

# Word saves a password-protected DOCX not as a zip but as an OLE compound file holding
# an "EncryptionInfo" stream (its directory names are UTF-16).
OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
OLE_ENCRYPTION_INFO = "EncryptionInfo".encode("utf-16-le")


def document_format(file_name: str | None, mime_type: str | None) -> str | None:
    """The format by extension first, then by mime type; None when neither names one (the
    content decides then: text, or not supported)."""
    _, dot, extension = (file_name or "").rpartition(".")
    extension = extension.lower() if dot else ""
    if extension in ("pdf", *OFFICE):
        return extension
    if extension in EXTENSIONS:
        return EXTENSIONS[extension]
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
            # Named nothing we know (.json, .py, .log, .yaml, .html, none): text or not.
            if not data.strip():
                raise DocumentError("empty")
            text = _text_of(data)
            if text is None:
                raise DocumentError("unsupported")
            return Document(_nonempty(text[: budget.chars]), "txt", None)
        case "pdf":
            return _pdf(data, budget)
        case "docx":
            return Document(_nonempty(_docx(data, budget)), "docx", None)
        case "xlsx":
            return Document(_nonempty(_xlsx(data, budget)), "xlsx", None)
        case "pptx":
            return Document(_nonempty(_pptx(data, budget)), "pptx", None)
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
    _check_office_file(data)
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


def _xlsx(data: bytes, budget: TextBudget) -> str:
    """Return each sheet under its name, its rows as lines of cells joined with " | "
    (formulas as their last computed values), up to the budget."""
    _check_office_file(data)
    lines: list[str] = []
    chars = 0
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            for sheet in book.worksheets:
                heading = len(lines)
                lines.append(f"## {sheet.title}")
                for row in sheet.iter_rows(values_only=True):
                    cells = [_cell(value) for value in row]
                    while cells and not cells[-1]:
                        cells.pop()
                    if cells:
                        lines.append(" | ".join(cells))
                        chars += len(lines[-1]) + 1
                    if chars >= budget.chars or len(lines) >= budget.paragraphs:
                        return "\n".join(lines)[: budget.chars]
                if len(lines) == heading + 1:
                    lines.pop()  # a sheet without a value: its name is no text
        finally:
            book.close()
    except OFFICE_FAILURES as exc:
        raise DocumentError("broken") from exc
    return "\n".join(lines)[: budget.chars]


def _cell(value: object) -> str:
    """Return a cell's value as text: a date without a time of day as the date alone."""
    if value is None:
        return ""
    if isinstance(value, datetime) and value.time() == time():
        return value.date().isoformat()
    return str(value).strip()


def _pptx(data: bytes, budget: TextBudget) -> str:
    """Return each slide under its number: its text boxes and tables in order, then its
    speaker notes, up to the budget."""
    _check_office_file(data)
    lines: list[str] = []
    try:
        deck = pptx.Presentation(io.BytesIO(data))
        for number, slide in enumerate(deck.slides, start=1):
            lines.append(f"## Slide {number}")
            texts = [text for shape in slide.shapes for text in _shape_texts(shape)]
            if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
                notes = slide.notes_slide.notes_text_frame.text.strip()
                texts += [f"Notes: {notes}"] if notes else []
            lines += texts
            if sum(map(len, lines)) >= budget.chars or len(lines) >= budget.paragraphs:
                break
    except OFFICE_FAILURES as exc:
        raise DocumentError("broken") from exc
    if all(line.startswith("## Slide ") for line in lines):
        raise DocumentError("empty")
    return "\n".join(lines)[: budget.chars]


def _shape_texts(shape: BaseShape) -> list[str]:
    """Return the text of a slide's shape: a text box's, a table's rows, a group's shapes'."""
    if isinstance(shape, GroupShape):
        return [text for inner in shape.shapes for text in _shape_texts(inner)]
    if isinstance(shape, GraphicFrame) and shape.has_table:
        rows = shape.table.rows
        return [" | ".join(cell.text.strip() for cell in row.cells) for row in rows]
    if isinstance(shape, Shape) and shape.has_text_frame and shape.text_frame.text.strip():
        return [shape.text_frame.text]
    return []


def _check_office_file(data: bytes) -> None:
    """Refuse a password-protected Office file (it is no zip then) or a zip bomb."""
    if data.startswith(OLE_SIGNATURE) and OLE_ENCRYPTION_INFO in data:
        raise DocumentError("encrypted")
    _check_unzipped_size(data)


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
    """Decode a file named as text whatever its encoding; a CSV becomes lines of "a | b | c".
    Not text after all: damaged."""
    if not data.strip():
        raise DocumentError("empty")
    text = _text_of(data)
    if text is None:
        raise DocumentError("broken")
    return _csv_lines(text) if fmt == "csv" else text


# Byte order marks: the one way text legitimately holds NUL bytes (UTF-16 and UTF-32).
_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def _text_of(data: bytes) -> str | None:
    """Return the bytes as text if they are text (by content, whatever the name), else None.

    Valid UTF-8 is text; otherwise bytes with NULs are binary unless a byte order mark
    says UTF-16 or UTF-32, and charset-normalizer guesses the rest's encoding. Either way,
    text more than 1% control characters is binary that decoded "plausibly".
    """
    try:
        text: str | None = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = None
        if b"\x00" not in data or data.startswith(_BOMS):
            guess = from_bytes(data).best()
            text = None if guess is None else str(guess)
    return None if text is None or _looks_binary(text) else text


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
