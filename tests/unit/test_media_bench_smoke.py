"""`python -m bench media --quick` runs and reports every case."""

from __future__ import annotations

import pytest

from bench.media import main


def test_the_media_bench_reports_each_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--repeat", "1"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    whats = [row.split("|")[1].strip() for row in rows]
    assert whats == ["PDF text", "PDF text", "DOCX text", "TXT text", "photo resized",
                     "cut to budget"]  # fmt: skip
    assert all(float(row.split("|")[3]) > 0 for row in rows)
