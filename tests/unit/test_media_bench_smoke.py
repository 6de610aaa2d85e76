"""`python -m bench media --quick` runs and reports every case."""

from __future__ import annotations

import pytest

from bench.media import main

pytestmark = pytest.mark.slow


def test_the_media_bench_reports_each_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--repeat", "1"]) == 0
    timed, sandboxed = capsys.readouterr().out.split("In the sandbox")
    rows = timed.strip().splitlines()[2:]
    whats = [row.split("|")[1].strip() for row in rows]
    assert whats == ["PDF text", "PDF text", "DOCX text", "TXT text", "photo resized",
                     "cut to budget"]  # fmt: skip
    assert all(float(row.split("|")[3]) > 0 for row in rows)
    cells = [[c.strip() for c in row.split("|")[1:-1]] for row in sandboxed.splitlines()[4:]]
    outcomes = {what.split(",")[0]: outcome for what, _, outcome, _, _ in cells}
    assert outcomes["hostile PDF"] == outcomes["hostile DOCX"] == "refused: too_heavy"
    assert outcomes["normal PDF"].endswith("50/50 pages")
    assert all(float(seconds) > 0 and float(peak) > 0 for *_, seconds, peak in cells)
