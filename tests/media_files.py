"""Build the files users send (PDF, DOCX, XLSX, PPTX, images) in memory, without external tools.

`pdf_bytes` writes the PDF syntax by hand so a test controls exactly what is in the file.
Its pages use Helvetica; characters outside ASCII get codes from 128 up through the font's
`/Differences` with `uniXXXX` glyph names, which text extraction maps back (Cyrillic
included). Viewers have no Cyrillic glyphs in Helvetica: such text extracts but does not show.
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib
from pathlib import Path

import docx
import openpyxl
import pptx
import pptx.util
from PIL import Image
from pypdf import PdfReader, PdfWriter

# The lowest code a non-ASCII character gets; 128 codes up to 255 are available.
FIRST_EXTRA_CODE = 128


def pdf_bytes(pages: list[str]) -> bytes:
    """Return a PDF with one page per string, each line of it a line of Helvetica text."""
    extras = sorted({ch for page in pages for ch in page if ord(ch) > 126})
    if len(extras) > 256 - FIRST_EXTRA_CODE:
        raise ValueError("too many distinct non-ASCII characters for one font")
    codes = {ch: FIRST_EXTRA_CODE + i for i, ch in enumerate(extras)}
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode(),
        _font(extras),
    ]
    for i, page in enumerate(pages):
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>".encode()
        )
        stream = _content(page, codes)
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    return _assemble(objects)


def _font(extras: list[str]) -> bytes:
    """Return Helvetica whose codes from 128 on name the extra characters' glyphs."""
    names = " ".join(f"/uni{ord(ch):04X}" for ch in extras)
    return (
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding "
        b"<< /Type /Encoding /BaseEncoding /WinAnsiEncoding /Differences [%d %s] >> >>"
        % (FIRST_EXTRA_CODE, names.encode())
    )


def _content(page: str, codes: dict[str, int]) -> bytes:
    """Return a content stream showing the page's lines top-down, 14 points apart."""
    shown = [b"(" + _pdf_string(line, codes) + b") Tj T*" for line in page.split("\n") if line]
    return b"BT /F1 12 Tf 14 TL 72 720 Td " + b" ".join(shown) + b" ET"


def _pdf_string(line: str, codes: dict[str, int]) -> bytes:
    """Return the line as the inside of a PDF literal string in the font's codes."""
    raw = bytes(codes.get(ch, ord(ch)) for ch in line)
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def _assemble(objects: list[bytes]) -> bytes:
    """Return the file: numbered objects, the xref table of their offsets, the trailer."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def encrypted_pdf_bytes(text: str, password: str) -> bytes:
    """Return a one-page PDF encrypted (RC4, which pypdf reads without extra packages)."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes([text]))))
    writer.encrypt(password, owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def broken_pdf_bytes() -> bytes:
    """Return a PDF cut off inside its first page's content, as a broken download is."""
    whole = pdf_bytes(["First page text", "Second page text"])
    return whole[: whole.index(b"BT /F1") + 10]


def docx_bytes(paragraphs: list[str], table: list[list[str]] | None = None) -> bytes:
    """Return a DOCX with the paragraphs, then the table (rows of cell texts) if given."""
    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=max(len(row) for row in table))
        for row, cells in zip(grid.rows, table, strict=True):
            for cell, text in zip(row.cells, cells, strict=False):
                cell.text = text
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx_bytes(sheets: dict[str, list[list[object]]]) -> bytes:
    """Return an XLSX with a sheet of rows (cell values) per name, in order."""
    book = openpyxl.Workbook()
    book.remove(book.active)  # type: ignore[arg-type]
    for title, rows in sheets.items():
        sheet = book.create_sheet(title)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def pptx_bytes(
    slides: list[tuple[str, str]],
    table: list[list[str]] | None = None,
    notes: str | None = None,
) -> bytes:
    """Return a PPTX with a (title, body) slide each, then a slide with the table (rows of
    cell texts) if given; `notes` are the first slide's speaker notes."""
    deck = pptx.Presentation()
    for title, body in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])  # title and content
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    if notes is not None:
        deck.slides[0].notes_slide.notes_text_frame.text = notes
    if table:
        slide = deck.slides.add_slide(deck.slide_layouts[6])  # blank
        inch = pptx.util.Inches(1)
        grid = slide.shapes.add_table(len(table), len(table[0]), inch, inch, 6 * inch, inch)
        for row, cells in zip(grid.table.rows, table, strict=True):
            for cell, text in zip(row.cells, cells, strict=True):
                cell.text = text
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def padded_docx_bytes(unzipped_bytes: int) -> bytes:
    """Return a valid DOCX carrying an extra entry of zeros that unzips to that many bytes.

    Zeros deflate about a thousand to one, so the file stays small: a zip bomb in miniature.
    """
    out = io.BytesIO(docx_bytes(["Padded"]))
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(out, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("word/media/padding.bin", "w", force_zip64=True) as entry:
            for start in range(0, unzipped_bytes, len(chunk)):
                entry.write(chunk[: unzipped_bytes - start])
    return out.getvalue()


def image_bytes(
    width: int,
    height: int,
    fmt: str = "JPEG",
    color: tuple[int, ...] = (200, 30, 30),
    exif_orientation: int | None = None,
) -> bytes:
    """Return a one-colour image; a 4-tuple colour makes an RGBA image (PNG keeps the alpha)."""
    image = Image.new("RGBA" if len(color) == 4 else "RGB", (width, height), color)
    exif = Image.Exif()
    if exif_orientation is not None:
        exif[0x0112] = exif_orientation  # the EXIF Orientation tag
    out = io.BytesIO()
    image.save(out, fmt, exif=exif)
    return out.getvalue()


def hostile_pdf_bytes(pages: int = 300, stream_mb: float = 6.0) -> bytes:
    """Return a small PDF whose pages all point at one huge compressed content stream.

    The stream shows a space a million times: every page makes pypdf parse all of it again,
    about 15 s and 300 MB each, for text that is only whitespace.
    """
    unit = b"BT /F1 12 Tf ( ) Tj ET "
    raw = unit * int(stream_mb * 1024 * 1024 / len(unit))
    packed = zlib.compress(raw, 9)
    kids = " ".join(f"{4 + i} 0 R" for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(packed), packed),
    ]
    objects += [
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 "
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >> /Contents 3 0 R >>"
    ] * pages
    return _assemble(objects)


def empty_paragraphs_docx_bytes(paragraphs: int = 16_000_000) -> bytes:
    """Return a DOCX whose body is that many empty paragraphs: 16 million pack to about
    170 KB and unzip to just under MAX_DOCX_UNZIPPED, and python-docx would need gigabytes."""
    out = io.BytesIO(docx_bytes(["Start"]))
    with zipfile.ZipFile(out) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    body = entries["word/document.xml"]
    start = body.index(b"<w:body>") + len(b"<w:body>")
    entries["word/document.xml"] = body[:start] + b"<w:p/>" * paragraphs + body[start:]
    rebuilt = io.BytesIO()
    with zipfile.ZipFile(rebuilt, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return rebuilt.getvalue()


def child_pids() -> set[int]:
    """Return the pids of this process's children (Linux): the sandbox's readers among them."""
    found: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        found |= {int(pid) for pid in (task / "children").read_text().split()}
    return found
