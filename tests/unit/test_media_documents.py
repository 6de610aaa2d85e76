"""Documents to text: each format read right, each kind of bad file one DocumentError reason."""

from __future__ import annotations

import io
import os
import random
import zipfile
from datetime import date

import pytest

from src.media.documents import (
    MAX_DOCX_UNZIPPED,
    Document,
    DocumentError,
    TextBudget,
    extract_text,
)
from src.media.documents import document_format as fmt
from tests.media_files import (
    broken_pdf_bytes,
    docx_bytes,
    encrypted_pdf_bytes,
    padded_docx_bytes,
    pdf_bytes,
    pptx_bytes,
    xlsx_bytes,
)

RUSSIAN = "Съешь же ещё этих мягких французских булок, да выпей чаю. Ёжик в тумане.\n"


def reason(data: bytes, file_name: str | None, mime_type: str | None = None) -> str:
    """Return the reason extract_text refuses the file (failing when it does not)."""
    with pytest.raises(DocumentError) as refused:
        extract_text(data, file_name, mime_type)
    return refused.value.reason


def test_format_by_extension_first_then_mime_type() -> None:
    assert fmt("Report.PDF", "text/plain") == "pdf"
    assert fmt("notes.md", None) == "md"
    assert fmt("scan", "application/pdf") == "pdf"
    assert fmt(None, "text/csv; charset=utf-8") == "csv"
    assert fmt("book.epub", "application/epub+zip") is None
    assert fmt(None, None) is None


def test_unsupported_format() -> None:
    assert reason(b"PK\x03\x04", "book.epub", "application/epub+zip") == "unsupported"


def test_pdf_pages_in_order_with_their_count() -> None:
    pages = ["Page one (first)\nsecond line", "Page two \\ back", "Страница три: ёж"]
    document = extract_text(pdf_bytes(pages), "three.pdf")
    assert document == Document(
        "Page one (first)\nsecond line\n\nPage two \\ back\n\nСтраница три: ёж", "pdf", 3
    )


def test_pdf_pages_past_max_pages_are_not_read() -> None:
    document = extract_text(pdf_bytes(["one", "two", "three"]), "a.pdf", budget=TextBudget(pages=2))
    assert (document.text, document.pages, document.truncated_pages) == ("one\n\ntwo", 3, 1)


def test_pdf_encrypted_with_the_empty_password_is_read() -> None:
    assert extract_text(encrypted_pdf_bytes("Open secret", ""), "a.pdf").text == "Open secret"


def test_pdf_encrypted_with_a_password_is_refused() -> None:
    assert reason(encrypted_pdf_bytes("Closed secret", "hunter2"), "a.pdf") == "encrypted"


def test_pdf_cut_off_is_broken() -> None:
    assert reason(broken_pdf_bytes(), "a.pdf") == "broken"


def test_random_bytes_named_pdf_are_broken() -> None:
    assert reason(random.Random(1).randbytes(4096), "a.pdf") == "broken"


def test_pdf_without_text_is_empty() -> None:
    assert reason(pdf_bytes(["", ""]), "scan.pdf") == "empty"


GOOD = {
    "a.pdf": lambda: pdf_bytes(["Hello world", "Привет"]),
    "a.docx": lambda: docx_bytes(["a"]),
    "a.xlsx": lambda: xlsx_bytes({"S": [["a", 1]]}),
    "a.pptx": lambda: pptx_bytes([("T", "b")]),
}


@pytest.mark.parametrize("name", list(GOOD))
def test_damaged_files_fail_only_with_document_error(name: str) -> None:
    """Cut and scribbled-over copies of a good file never raise anything else."""
    good = GOOD[name]()
    rng = random.Random(17)
    for _ in range(500):
        damaged = bytearray(good)
        for _ in range(rng.randrange(1, 20)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        for data in (bytes(damaged), good[: rng.randrange(len(good))]):
            try:
                extract_text(data, name)
            except DocumentError:
                pass


def test_docx_paragraphs_then_table_rows() -> None:
    data = docx_bytes(["Title", "First  paragraph", "Второй абзац"], [["a", "b"], ["1", "2"]])
    document = extract_text(data, "a.docx")
    assert document == Document("Title\nFirst paragraph\nВторой абзац\na | b\n1 | 2", "docx", None)


def test_docx_not_a_zip_is_broken() -> None:
    assert reason(os.urandom(2048), "a.docx") == "broken"


def test_zip_without_a_word_document_is_broken() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("readme.txt", "not a document")
    assert reason(out.getvalue(), "a.docx") == "broken"


def test_password_protected_docx_is_encrypted() -> None:
    # Word's encrypted DOCX: an OLE file (its signature, a sector of directory entries).
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504) + "EncryptionInfo".encode("utf-16-le")
    assert reason(ole + bytes(1024), "a.docx") == "encrypted"


def test_docx_unzipping_past_the_limit_is_too_big() -> None:
    data = padded_docx_bytes(MAX_DOCX_UNZIPPED + 1)
    assert len(data) < 1_000_000
    assert reason(data, "bomb.docx") == "too_big"


def test_docx_without_text_is_empty() -> None:
    assert reason(docx_bytes(["", "   "]), "a.docx") == "empty"


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "cp1251"])
def test_text_encodings(encoding: str) -> None:
    document = extract_text((RUSSIAN * 3).encode(encoding), "notes.txt")
    assert document == Document((RUSSIAN * 3).strip(), "txt", None)


def test_binary_named_txt_is_broken() -> None:
    assert reason(random.Random(2).randbytes(4096), "a.txt") == "broken"
    assert reason(b"MZ\x90\x00\x03\x00\x00\x00" * 64, "a.txt") == "broken"


def test_empty_text_file_is_empty() -> None:
    assert reason(b" \r\n\t\n", "a.txt") == "empty"


def test_markdown_keeps_indentation_and_tidies_the_rest() -> None:
    prose = "A paragraph long enough that one stray NUL in it is a glitch, not binary data."
    text = f"# Title  \r\n\r\n\r\n\r\n- item   one\n    code\x00 here\n\n{prose}\n"
    document = extract_text(text.encode(), "a.md")
    assert document == Document(f"# Title\n\n- item one\n    code here\n\n{prose}", "md", None)


def test_csv_rows_become_lines_of_cells() -> None:
    data = 'name;city\nAnna;"Paris; France"\nБорис;Москва\n'.encode()
    assert extract_text(data, "a.csv").text == "name | city\nAnna | Paris; France\nБорис | Москва"


def test_csv_found_by_mime_type() -> None:
    assert extract_text(b"a,b\n1,2\n", None, "text/csv") == Document("a | b\n1 | 2", "csv", None)


def test_csv_without_a_delimiter_stays_as_text() -> None:
    assert extract_text(b"one column\nsecond row\n", "a.csv").text == "one column\nsecond row"


# --- any text file, by its content; spreadsheets and slides (issue 41) -------------------

EVERYDAY_TEXT = {
    "config.json": '{"name": "Аня", "tags": ["a", "b"]}\n',
    "script.py": "def main() -> None:\n    print('hi')\n",
    "server.log": "2026-11-28 10:00:01 INFO started\n2026-11-28 10:00:02 WARN slow\n",
    "compose.yaml": "services:\n  db:\n    image: postgres\n",
    "feed.xml": '<?xml version="1.0"?>\n<feed><title>Новости</title></feed>\n',
    "page.html": "<!doctype html>\n<html><body><p>Hello</p></body></html>\n",
    "Makefile": "all:\n\tpython -m build\n",
}


@pytest.mark.parametrize("name", list(EVERYDAY_TEXT))
def test_every_text_file_is_read_as_text(name: str) -> None:
    text = EVERYDAY_TEXT[name]
    document = extract_text(text.encode(), name, "application/octet-stream")
    assert document == Document(text.strip("\n"), "txt", None)


def test_text_is_known_by_content_in_any_encoding() -> None:
    assert extract_text(RUSSIAN.encode("cp1251"), "old.log").text == RUSSIAN.strip()
    assert extract_text(RUSSIAN.encode("utf-16"), "export.json").text == RUSSIAN.strip()
    assert extract_text(b"key: value\n", None).text == "key: value"  # no name at all


def test_binary_is_not_text_whatever_its_name() -> None:
    executable = b"MZ\x90\x00\x03\x00\x00\x00" * 64
    for name in ("program.exe", "data.json", "notes", None):
        assert reason(executable, name) == "unsupported"
        assert reason(random.Random(3).randbytes(4096), name) == "unsupported"
    assert reason(b"ok\x00" * 100, "a.log") == "unsupported"  # NULs: not text
    assert reason(b"\n \n", "a.json") == "empty"


def test_xlsx_sheets_become_lines_of_cells() -> None:
    sheets: dict[str, list[list[object]]] = {
        "Budget": [["item", "cost", None], ["чай", 3.5], [None, None], ["day", date(2026, 1, 2)]],
        "Blank": [],
        "Notes": [[None, "second column"]],
    }
    document = extract_text(xlsx_bytes(sheets), "Budget.XLSX")
    expected = "## Budget\nitem | cost\nчай | 3.5\nday | 2026-01-02\n## Notes\n | second column"
    assert document == Document(expected, "xlsx", None)
    mime = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    assert extract_text(xlsx_bytes(sheets), "download", mime).text == expected


def test_xlsx_rows_past_the_budget_are_not_read() -> None:
    rows: list[list[object]] = [[f"row {i}"] for i in range(1000)]
    document = extract_text(xlsx_bytes({"S": rows}), "a.xlsx", budget=TextBudget(paragraphs=10))
    assert document.text.splitlines() == ["## S", *[f"row {i}" for i in range(9)]]


def test_pptx_slides_with_their_tables_and_notes() -> None:
    data = pptx_bytes(
        [("Plan", "Ship it\nthen rest"), ("Итоги", "Рост")], [["a", "b"], ["1", "2"]], "say hi"
    )
    document = extract_text(data, "deck.pptx")
    expected = (
        "## Slide 1\nPlan\nShip it\nthen rest\nNotes: say hi\n"
        "## Slide 2\nИтоги\nРост\n## Slide 3\na | b\n1 | 2"
    )
    assert document == Document(expected, "pptx", None)


@pytest.mark.parametrize("name", ["a.xlsx", "a.pptx"])
def test_bad_spreadsheets_and_slides(name: str) -> None:
    assert reason(os.urandom(2048), name) == "broken"
    assert reason(docx_bytes(["a Word file, misnamed"]), name) == "broken"
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504) + "EncryptionInfo".encode("utf-16-le")
    assert reason(ole + bytes(1024), name) == "encrypted"
    empty = xlsx_bytes({"S": []}) if name == "a.xlsx" else pptx_bytes([("", "")])
    assert reason(empty, name) == "empty"


def test_a_spreadsheet_unzipping_past_the_limit_is_too_big() -> None:
    out = io.BytesIO(xlsx_bytes({"S": [["a"]]}))
    with (
        zipfile.ZipFile(out, "a", compression=zipfile.ZIP_DEFLATED) as archive,
        archive.open("xl/media/padding.bin", "w", force_zip64=True) as entry,
    ):
        for _ in range(MAX_DOCX_UNZIPPED // (1 << 20) + 1):
            entry.write(bytes(1 << 20))
    assert reason(out.getvalue(), "bomb.xlsx") == "too_big"
