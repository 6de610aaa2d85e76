"""The runs list of the web page: turns newest first, filtered, a page at a time.

User and conversation filters are SQL (the conversation's threads); status and tools
are known only once a turn's checkpoints (and, for tools, its values) are read, so those
filters read turns a batch at a time, newest first, and stop after `SCAN_LIMIT` of them:
a page costs at most that many turns' headers, however large the database. The page's
cursor is the first checkpoint of the last turn looked at (matching or not): the next
page starts below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from src.devtools.checkpoints import CheckpointReader
from src.devtools.turns import Turn

BATCH = 50
SCAN_LIMIT = 500
STATUSES = ("ok", "error", "incomplete")


@dataclass(frozen=True)
class RunFilter:
    """What the runs list shows: whose turns, which, and from where."""

    user: int | None = None
    thread: str | None = None
    """A conversation id, or a unique prefix of one."""
    status: str | None = None
    """ok, error or incomplete."""
    tool: str | None = None
    """Only turns that ran this tool."""
    before: str | None = None
    """Cursor: only turns that start before this checkpoint id."""
    limit: int = 20

    @property
    def needs_scan(self) -> bool:
        return self.status is not None or self.tool is not None


@dataclass
class RunPage:
    """One page of turns, with its values, and where the next page starts."""

    turns: list[Turn] = field(default_factory=list)
    next_before: str | None = None
    """The cursor of the next (older) page; None when no older turn exists."""
    scanned: int = 0
    """Turns looked at for this page."""


async def find_runs(reader: CheckpointReader, wanted: RunFilter) -> RunPage:
    """Return the page of turns `wanted` asks for, newest first, values loaded."""
    threads = await _threads(reader, wanted)
    page = RunPage()
    if threads == []:
        return page
    before = wanted.before
    batch = BATCH if wanted.needs_scan else wanted.limit + 1
    while heads := await reader.heads(threads, before, batch):
        for turn in await reader.turns_at(heads):
            if len(page.turns) == wanted.limit or page.scanned == SCAN_LIMIT:
                return page  # an older turn exists: the cursor stays on the last looked at
            page.scanned += 1
            page.next_before = turn.head.checkpoint_id
            if not _may_match(turn, wanted):
                continue  # known from its checkpoints alone: no need to read its values
            await reader.load_values(turn)
            if wanted.tool is None or wanted.tool in turn.tools_used:
                page.turns.append(turn)
        before = heads[-1][1]
    page.next_before = None  # every older turn was looked at
    return page


def _may_match(turn: Turn, wanted: RunFilter) -> bool:
    """Tell from a turn's structure alone whether it may pass the filter."""
    if wanted.status is not None and turn.status != wanted.status:
        return False
    return wanted.tool is None or "tools" in turn.nodes


async def _threads(reader: CheckpointReader, wanted: RunFilter) -> list[str] | None:
    """Return the threads the filter allows (None: all of them)."""
    threads = None if wanted.user is None else await reader.user_threads(wanted.user)
    if wanted.thread is None:
        return threads
    thread_id = await reader.resolve_thread(wanted.thread)
    return [thread_id] if threads is None or thread_id in threads else []
