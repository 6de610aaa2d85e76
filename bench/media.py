"""What reading media costs this machine: `python -m bench media [--quick] [--repeat N]`.

Transcription and the photo description are the model endpoint's time; what runs here is
the extraction of a document's text, its cut to the token budget, and a photo's resize.
They delay their turn only, but take a core while they run: the first table says how long.

The second table reads documents as the bot does, each in a sandboxed child process
(src/media/sandbox.py) under DOCUMENT_READ_SECONDS and DOCUMENT_READ_MB: hostile files (a
small PDF whose pages all show one huge stream, a DOCX of millions of empty paragraphs) end
within those limits, and a normal 50-page PDF still reads whole.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from src.config import Settings
from src.graph.tokens import make_counter
from src.media.documents import TextBudget, extract_text
from src.media.images import prepare_image
from src.media.sandbox import Limits, Outcome, read_document
from src.services.media import MediaReader

ROOT = Path(__file__).resolve().parent.parent

PAGE = " ".join(["The committee reviewed the budget and approved the plan."] * 30)


def _timed(work: Callable[[], Any], repeat: int) -> float:
    """Return the median milliseconds of `work` over `repeat` runs."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _test_files() -> Any:
    """Return the module that builds test files (it lives in the source checkout)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import tests.media_files

    return tests.media_files


def _cases(quick: bool) -> list[tuple[str, str, Callable[[], Any]]]:
    """Return (what, size, work) for each case."""
    files = _test_files()
    docx_bytes, image_bytes, pdf_bytes = files.docx_bytes, files.image_bytes, files.pdf_bytes

    pages = (3, 30) if quick else (3, 30, 300)
    cases: list[tuple[str, str, Callable[[], Any]]] = []
    for n in pages:
        pdf = pdf_bytes([PAGE] * n)
        cases.append(("PDF text", f"{n} pages, {len(pdf) // 1024} KB", _extract(pdf, "a.pdf")))
    for n in (50,) if quick else (50, 500):
        docx = docx_bytes([PAGE[:300]] * n)
        cases.append(("DOCX text", f"{n} paragraphs", _extract(docx, "a.docx")))
    text = ("Line of a plain text file with some words in it.\n" * 20_000).encode()
    cases.append(("TXT text", f"{len(text) // 1024} KB", _extract(text, "a.txt")))
    sides = ((1280, 960),) if quick else ((1280, 960), (4000, 3000))
    for width, height in sides:
        photo = image_bytes(width, height)
        cases.append(("photo resized", f"{width}x{height} JPEG", partial(prepare_image, photo)))
    reader = MediaReader.__new__(MediaReader)  # only its cut: no endpoint, no database
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    reader.settings = settings
    reader.deps = _Deps(make_counter(settings.llm_model))  # type: ignore[assignment]
    book = extract_text(pdf_bytes([PAGE] * pages[-1]), "a.pdf")
    cases.append(("cut to budget", f"{pages[-1]} pages", lambda: reader._cut(book)))
    return cases


class _Deps:
    def __init__(self, counter: Any) -> None:
        self.counter = counter


def _extract(data: bytes, name: str) -> Callable[[], Any]:
    return partial(extract_text, data, name)


def _sandboxed(quick: bool, settings: Settings) -> list[tuple[str, str, Outcome]]:
    """Read each file as the bot does; return (what, size, outcome)."""
    files = _test_files()
    seconds = 2.0 if quick else settings.document_read_seconds
    limits = Limits(seconds, settings.document_read_mb, TextBudget())
    cases = [
        ("hostile PDF, 300 pages on one stream", "a.pdf", files.hostile_pdf_bytes()),
        ("hostile DOCX, 16M empty paragraphs", "a.docx", files.empty_paragraphs_docx_bytes()),
        ("normal PDF, 50 pages", "a.pdf", files.pdf_bytes([PAGE] * 50)),
    ]
    return [
        (what, f"{len(data) // 1024} KB", asyncio.run(read_document(data, name, None, limits)))
        for what, name, data in cases
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="small sizes only (a smoke run)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (median)")


def report(args: argparse.Namespace) -> int:
    """Print one Markdown table row per case."""
    print("| what | size | median ms |")
    print("|---|---|---:|")
    for what, size, work in _cases(args.quick):
        print(f"| {what} | {size} | {_timed(work, args.repeat):.1f} |")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    seconds = 2.0 if args.quick else settings.document_read_seconds
    print(f"\nIn the sandbox (limits: {seconds:g} s, {settings.document_read_mb} MB):\n")
    print("| file | size | outcome | seconds | peak MB |")
    print("|---|---|---|---:|---:|")
    for what, size, outcome in _sandboxed(args.quick, settings):
        document = outcome.document
        ended = f"read, {len(document.text)} chars" if document else f"refused: {outcome.error}"
        if document is not None and document.pages:
            ended += f", {document.pages - document.truncated_pages}/{document.pages} pages"
        print(f"| {what} | {size} | {ended} | {outcome.seconds:.1f} | {outcome.peak_mb:.0f} |")
    return 0


async def _command(args: argparse.Namespace, settings: Settings) -> int:
    return report(args)


def register(sub: Any) -> None:
    """Add `tgagent bench media [options]` to `tgagent bench`'s subcommands."""
    parser = sub.add_parser(
        "media", help="what reading documents and photos costs", description=__doc__
    )
    add_arguments(parser)
    parser.set_defaults(handler=_command)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench media", description=__doc__)
    add_arguments(parser)
    return report(parser.parse_args(argv))
