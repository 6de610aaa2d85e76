"""Read an untrusted document in a child process that can be stopped.

A crafted file makes pypdf or python-docx spend an hour and gigabytes on a few kilobytes
(pages that all point at one huge content stream, a body of millions of empty
paragraphs). So each document is read by `python -m src.media.sandbox` in a process of
its own: CPU time and address space capped with `setrlimit` in the child, a wall-clock
deadline kept by the parent, which kills the child when the deadline passes or when the
awaiting task is cancelled (/stop, shutdown). The child stops by itself at the text budget
(pages, paragraphs, characters). No thread is used: the event loop only waits on a pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import resource
import signal
import sys
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

from src.media.document_types import Document, DocumentError, Reason, TextBudget

logger = logging.getLogger(__name__)

MB = 1024 * 1024
# Where the `src` package lives: the child imports it from there, whatever the cwd.
SOURCE_ROOT = str(Path(__file__).resolve().parents[2])
# A parse that failed with this share of the address space in use failed for want of it.
NEAR_CAP = 0.9
# How many refused documents are remembered (their digests: 32 bytes each).
REMEMBERED = 1024


@dataclass(frozen=True)
class Limits:
    """What reading one document may take."""

    seconds: float
    """Wall-clock time, the child's start included; its CPU time is capped the same."""
    memory_mb: int
    """The child's address space."""
    budget: TextBudget
    """Where reading stops: pages, paragraphs, characters."""


@dataclass(frozen=True)
class Outcome:
    """How one child ended: what it read, or why not, and what it cost."""

    document: Document | None
    error: str | None
    seconds: float
    peak_mb: float
    """The child's peak resident memory (Linux's VmHWM; 0 where /proc is missing)."""


async def read_document(
    data: bytes, file_name: str | None, mime_type: str | None, limits: Limits
) -> Outcome:
    """Read the document in a child process; kill it at the deadline or when cancelled.

    A child stopped by a limit (time, CPU time, memory) ends as the error "too_heavy".
    """
    request = {"name": file_name, "mime": mime_type, "limits": asdict(limits)}
    started = time.perf_counter()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "src.media.sandbox",
        json.dumps(request),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        # Nothing of ours (API keys, DSNs) in reach of a parser exploit.
        env={"PYTHONPATH": SOURCE_ROOT, "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C.UTF-8"},
    )
    peak = 0.0
    try:
        out, err = await asyncio.wait_for(child.communicate(data), limits.seconds)
    except TimeoutError:
        out, err = b"", b""
    finally:
        if child.returncode is None:  # the deadline, or the task was cancelled
            peak = _peak_mb(child.pid)
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            # Reaped even when cancelled: no zombie, and the memory is given back now.
            await asyncio.shield(child.wait())
    seconds = time.perf_counter() - started
    if child.returncode == 0:
        answer = json.loads(out)
        peak = float(answer.pop("peak_mb"))
        if "error" in answer:
            return Outcome(None, str(answer["error"]), seconds, peak)
        return Outcome(Document(**answer), None, seconds, peak)
    if child.returncode in (-signal.SIGKILL, -signal.SIGXCPU):
        logger.info("reading %r stopped by a limit after %.1f s", file_name, seconds)
        return Outcome(None, "too_heavy", seconds, peak)
    tail = err.decode(errors="replace")[-500:]
    logger.warning("the document reader failed (%s): %s", child.returncode, tail)
    return Outcome(None, "broken", seconds, peak)


class Sandbox:
    """Read documents under limits, and never again one that a limit stopped."""

    def __init__(self, seconds: float, memory_mb: int) -> None:
        self.seconds = seconds
        self.memory_mb = memory_mb
        self.children = 0
        """Child processes started: what a refused document does not cost again."""
        self._heavy: OrderedDict[bytes, None] = OrderedDict()
        """Digests of the documents a limit stopped, most recent last."""

    async def read(
        self, data: bytes, file_name: str | None, mime_type: str | None, budget: TextBudget
    ) -> Document:
        """Return the document's text up to the budget; raise `DocumentError` otherwise.

        A document a limit stopped is refused at once when it comes again (a job run
        again, the same file sent again): the verdict is final.
        """
        digest = hashlib.sha256(data).digest()
        if digest in self._heavy:
            self._heavy.move_to_end(digest)
            raise DocumentError("too_heavy")
        self.children += 1
        outcome = await read_document(
            data, file_name, mime_type, Limits(self.seconds, self.memory_mb, budget)
        )
        if outcome.error == "too_heavy":
            self._heavy[digest] = None
            while len(self._heavy) > REMEMBERED:
                self._heavy.popitem(last=False)
        if outcome.document is None:
            raise DocumentError(cast(Reason, outcome.error))
        return outcome.document


def _peak_mb(pid: int | str, field: str = "VmHWM") -> float:
    """Return a live process's peak resident memory (`VmPeak`: address space) in MB, from
    Linux's /proc; 0 elsewhere."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    found = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else 0.0


def _confine(limits: Limits) -> None:
    """Cap this process's CPU time and address space, and write no core file."""
    # A second past the deadline: a reader that only computes meets the deadline first
    # (its CPU time cannot pass its wall time), so its peak memory is read before the
    # kill; the CPU limit stops what the deadline somehow missed.
    cpu = max(1, int(limits.seconds + 0.999)) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    memory = limits.memory_mb * MB
    try:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    except (ValueError, OSError):
        pass  # macOS refuses an address-space limit: the deadline still holds


def main() -> None:
    """The child: read the request, the bytes on stdin, and answer in JSON on stdout."""
    request = json.loads(sys.argv[1])
    raw = request["limits"]
    limits = Limits(raw["seconds"], raw["memory_mb"], TextBudget(**raw["budget"]))
    _confine(limits)
    data = sys.stdin.buffer.read()
    from src.media.documents import extract_text  # the child alone loads the readers

    try:
        document = extract_text(data, request["name"], request["mime"], budget=limits.budget)
        answer: dict[str, object] = asdict(document)
    except DocumentError as exc:
        answer = {"error": exc.reason}
        # lxml reports running out of memory as a syntax error ("unknown error"): a file
        # that failed with the address space nearly full failed for want of memory.
        if exc.reason == "broken" and _peak_mb("self", "VmPeak") > NEAR_CAP * limits.memory_mb:
            answer = {"error": "too_heavy"}
    except MemoryError:
        # The address-space limit: what was being built is freed by now.
        answer = {"error": "too_heavy"}
    # Not ru_maxrss: Linux keeps the parent's from before the exec.
    answer["peak_mb"] = _peak_mb("self")
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()
