"""`tgagent graph` renderers: built offline (no database, no network), every format."""

from __future__ import annotations

import html
import re
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from src.devtools.common import DevtoolsError
from src.devtools.graph_view import offline_graph, render_ascii, render_png, to_dot
from src.devtools.html_page import render_html, render_svg
from src.graph.main_graph import NODE_NAMES
from tests.conftest import make_settings

FAKE_RENDERER = """#!{python}
import sys
args = sys.argv[1:]
source = open(args[args.index("{flag}") + 1]).read()
open(args[args.index("-o") + 1], "wb").write(b"\\x89PNG" + source.encode())
"""


@pytest.fixture
def drawable(monkeypatch: pytest.MonkeyPatch) -> Any:
    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("building the graph must not open a connection")

    monkeypatch.setattr(socket, "create_connection", no_network)
    return offline_graph(make_settings()).get_graph()


def test_offline_graph_has_every_node(drawable: Any) -> None:
    assert set(NODE_NAMES) | {"__start__", "__end__"} == set(drawable.nodes)
    mermaid = drawable.draw_mermaid()
    assert all(f"\t{node}(" in mermaid for node in NODE_NAMES)


def test_ascii_lists_every_edge(drawable: Any) -> None:
    text = render_ascii(drawable)
    for edge in drawable.edges:
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(edge.source + " "))
        assert edge.target in line and (("-.->" in line) == bool(edge.conditional)), line


def test_html_page_draws_offline_and_says_what_needs_network(drawable: Any) -> None:
    page = render_html(drawable)
    svg = render_svg(drawable)
    assert svg in page and page.count("<rect ") == len(drawable.nodes)
    for node in drawable.nodes:
        assert f">{node}</text>" in svg and f"<td>{node}</td>" in page
    assert page.count("stroke-dasharray") == sum(1 for e in drawable.edges if e.conditional)
    source = html.unescape(re.search(r'<pre id="mermaid-src">(.*?)</pre>', page, re.S)[1])
    assert source == drawable.draw_mermaid()
    assert "works\noffline" in page and "could not be loaded" in page


@pytest.mark.parametrize(("exe", "flag"), [("mmdc", "-i"), ("dot", "-Tpng")])
def test_png_uses_a_local_renderer(
    drawable: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exe: str, flag: str
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(DevtoolsError, match="npm install -g @mermaid-js/mermaid-cli") as exc:
        render_png(drawable, tmp_path / "g.png")
    assert exc.value.code == 2
    fake = bin_dir / exe
    fake.write_text(FAKE_RENDERER.format(python=sys.executable, flag=flag))
    fake.chmod(0o755)
    assert render_png(drawable, tmp_path / "g.png") == exe
    data = (tmp_path / "g.png").read_bytes()
    assert data.startswith(b"\x89PNG") and b"save_response" in data
    if exe == "dot":
        assert data[4:].decode() == to_dot(drawable)
