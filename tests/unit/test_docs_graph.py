"""The graph drawn in the README and docs/devtools.md is the code's: `tgagent graph` prints
the same text (nodes, edges and every tool the model is offered)."""

from __future__ import annotations

from pathlib import Path

import pytest

from src.config import Settings
from src.devtools.graph_view import offline_graph, render_ascii

ROOT = Path(__file__).resolve().parents[2]
FIX = "regenerate it with `tgagent graph` (and `--format ascii`) and paste it in"


@pytest.fixture(scope="module")
def drawable() -> object:
    return offline_graph(Settings(_env_file=None)).get_graph()  # type: ignore[call-arg]


def _block_after(text: str, opening: str) -> str:
    """Return the code block's text from the line after `opening` to its closing fence."""
    start = text.index(opening) + len(opening)
    return text[start : text.index("\n```", start)].strip("\n")


def test_the_readme_draws_the_graph_of_the_code(drawable: object) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    drawn = _block_after(readme, "```mermaid\n")
    assert drawn == drawable.draw_mermaid().strip("\n"), f"README.md's graph: {FIX}"  # type: ignore[attr-defined]


def test_the_devtools_guide_shows_what_tgagent_graph_prints(drawable: object) -> None:
    guide = (ROOT / "docs" / "devtools.md").read_text(encoding="utf-8")
    mermaid = _block_after(guide, "$ tgagent graph\n")
    assert mermaid == drawable.draw_mermaid().strip("\n"), f"docs/devtools.md: {FIX}"  # type: ignore[attr-defined]
    ascii_text = _block_after(guide, "$ tgagent graph --format ascii\n")
    assert ascii_text == render_ascii(drawable).strip("\n"), f"docs/devtools.md: {FIX}"  # type: ignore[arg-type]


def test_the_guide_says_what_the_fake_model_server_needs() -> None:
    """It runs on aiohttp, a dev extra: `pip install -e .` alone cannot start it."""
    guide = (ROOT / "docs" / "devtools.md").read_text(encoding="utf-8")
    named = guide.index("python -m tests.fakes.openai_server")
    assert "pip install -e '.[dev]'" in guide[named : named + 300]
