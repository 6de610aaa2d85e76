"""What reading media costs this machine: `python -m bench media [--quick] [--repeat N]`.

Transcription and the photo description are the model endpoint's time; what runs here is
the extraction of a document's text, its cut to the token budget, and a photo's resize.
Each runs in a worker thread during a turn, so it delays that turn only, but it takes a
core while it runs: these figures say how long.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from src.config import Settings
from src.graph.tokens import make_counter
from src.media.documents import extract_text
from src.media.images import prepare_image
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


def _cases(quick: bool) -> list[tuple[str, str, Callable[[], Any]]]:
    """Return (what, size, work) for each case."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # tests.media_files lives in the source checkout
    from tests.media_files import docx_bytes, image_bytes, pdf_bytes

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="small sizes only (a smoke run)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (median)")


def report(args: argparse.Namespace) -> int:
    """Print one Markdown table row per case."""
    print("| what | size | median ms |")
    print("|---|---|---:|")
    for what, size, work in _cases(args.quick):
        print(f"| {what} | {size} | {_timed(work, args.repeat):.1f} |")
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
