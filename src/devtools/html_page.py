"""A self-contained HTML page of the graph: an inline SVG drawn here (works offline),
the Mermaid source (rendered by mermaid.js only when the page can load it), and tables."""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Collection
from datetime import UTC, datetime

from langchain_core.runnables.graph import Graph

from src.devtools.graph_view import Edge, node_notes, nodes_and_edges

BOX_H, ROW_GAP, COL_GAP, CHAR_W, PAD, MARGIN = 34, 64, 40, 8, 28, 90
MERMAID_JS = "https://cdn.jsdelivr.net/npm/mermaid@11/dist/mermaid.esm.min.mjs"


def _back_edges(nodes: list[str], edges: list[Edge]) -> set[Edge]:
    """Return the edges that close a loop (found by depth-first search from the start)."""
    out: dict[str, list[Edge]] = defaultdict(list)
    for e in edges:
        out[e.source].append(e)
    back: set[Edge] = set()
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(name: str) -> None:
        state[name] = 1
        for e in out[name]:
            if state.get(e.target) == 1:
                back.add(e)
            elif e.target not in state:
                visit(e.target)
        state[name] = 2

    for name in nodes:
        if name not in state:
            visit(name)
    return back


def _layout(nodes: list[str], forward: list[Edge]) -> dict[str, tuple[float, float, float]]:
    """Place nodes in rows by longest path from the start: name -> (x centre, y top, width)."""
    rank = dict.fromkeys(nodes, 0)
    for _ in nodes:  # longest path by relaxation; the forward edges form a DAG
        for e in forward:
            rank[e.target] = max(rank[e.target], rank[e.source] + 1)
    rows: dict[int, list[str]] = defaultdict(list)
    for name in nodes:
        rows[rank[name]].append(name)
    widths = {n: len(n) * CHAR_W + PAD for n in nodes}
    row_w = {r: sum(widths[n] for n in ns) + COL_GAP * (len(ns) - 1) for r, ns in rows.items()}
    total = max(row_w.values())
    place: dict[str, tuple[float, float, float]] = {}
    for r, names in rows.items():
        x = (total - row_w[r]) / 2 + MARGIN
        for name in names:
            place[name] = (x + widths[name] / 2, 20 + r * (BOX_H + ROW_GAP), widths[name])
            x += widths[name] + COL_GAP
    return place


def render_svg(drawable: Graph, highlight: Collection[str] = ()) -> str:
    """Draw the graph as SVG: boxes in rows, solid edges always taken, dashed ones routed;
    the nodes in `highlight` (the ones a turn ran) filled in amber, with class `visited`."""
    nodes, edges = nodes_and_edges(drawable)
    back = _back_edges(nodes, edges)
    place = _layout(nodes, [e for e in edges if e not in back])
    width = max(x + w / 2 for x, _, w in place.values()) + 160
    height = max(y for _, y, _ in place.values()) + BOX_H + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="monospace" font-size="13">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#444"/></marker></defs>',
    ]
    for e in edges:
        sx, sy, sw = place[e.source]
        tx, ty, tw = place[e.target]
        dash = ' stroke-dasharray="5,4"' if e.conditional else ""
        if e in back:  # loop back up on the source's side, clear of its neighbours
            side = -1 if sx < tx else 1
            x1, y1 = sx + side * sw / 2, sy + BOX_H / 2
            x2, y2 = tx + side * tw / 2, ty + BOX_H / 2
            bend = (min(x1, x2) - 50) if side < 0 else (max(x1, x2) + 50)
            d = f"M{x1:.0f},{y1:.0f} C{bend:.0f},{y1:.0f} {bend:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
        elif ty - sy > BOX_H + ROW_GAP:  # skips rows: swing out to the right
            x1, y1, x2, y2 = sx + sw / 2, sy + BOX_H / 2, tx + tw / 4, ty
            bend = max(x for x, _, _ in place.values()) + 120
            c2 = f"{bend:.0f},{y2 - 40:.0f}"
            d = f"M{x1:.0f},{y1:.0f} C{bend:.0f},{y1:.0f} {c2} {x2:.0f},{y2:.0f}"
        else:
            d = f"M{sx:.0f},{sy + BOX_H:.0f} L{tx:.0f},{ty:.0f}"
        parts.append(
            f'<path d="{d}" fill="none" stroke="#444" stroke-width="1.4"{dash} '
            'marker-end="url(#arrow)"/>'
        )
    for name, (x, y, w) in place.items():
        terminal = name in ("__start__", "__end__")
        rx = BOX_H / 2 if terminal else 6
        fill = "#ffffff" if name == "__start__" else "#bfb6fc" if name == "__end__" else "#f2f0ff"
        stroke, kind = "#7b6fd6", "node"
        if name in highlight:
            fill, stroke, kind = "#ffd166", "#b7791f", "node visited"
        parts.append(
            f'<g class="{kind}" data-node="{html.escape(name)}">'
            f'<rect x="{x - w / 2:.0f}" y="{y:.0f}" width="{w:.0f}" height="{BOX_H}" '
            f'rx="{rx:.0f}" fill="{fill}" stroke="{stroke}"/>'
            f'<text x="{x:.0f}" y="{y + BOX_H / 2 + 4:.0f}" text-anchor="middle">'
            f"{html.escape(name)}</text></g>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _tables(drawable: Graph) -> str:
    nodes, edges = nodes_and_edges(drawable)
    notes = node_notes(drawable)
    rows = []
    for name in nodes:
        outgoing = ", ".join(
            e.target + (" (router)" if e.conditional else "") for e in edges if e.source == name
        )
        rows.append(
            f"<tr><td>{html.escape(name)}</td><td>{html.escape(outgoing or '-')}</td>"
            f"<td>{html.escape(notes.get(name, ''))}</td></tr>"
        )
    edge_rows = [
        f"<tr><td>{html.escape(e.source)}</td><td>{html.escape(e.target)}</td>"
        f"<td>{'conditional (chosen by a router)' if e.conditional else 'always'}</td></tr>"
        for e in edges
    ]
    return (
        "<h2>Nodes</h2><table><tr><th>node</th><th>goes to</th><th>notes</th></tr>"
        + "".join(rows)
        + "</table><h2>Edges</h2><table><tr><th>from</th><th>to</th><th>kind</th></tr>"
        + "".join(edge_rows)
        + "</table>"
    )


def render_html(drawable: Graph, title: str = "tgagent graph") -> str:
    """Return one HTML file that shows the graph with or without network access."""
    mermaid = drawable.draw_mermaid()
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 4px 10px; text-align: left; font-family: monospace; }}
pre {{ background: #f6f6f6; padding: 1em; overflow: auto; }}
.note {{ color: #555; max-width: 60em; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="note">Generated by <code>tgagent graph --format html</code> on {when} from the
compiled LangGraph graph. The drawing below is plain SVG made by tgagent itself, so it works
offline; solid arrows are always taken, dashed ones are chosen by a router.</p>
{render_svg(drawable)}
<h2>Mermaid</h2>
<p class="note" id="mermaid-status">This page tries to load mermaid.js from
<code>{MERMAID_JS}</code> to draw LangGraph's own Mermaid diagram here. Loading&hellip;</p>
<div id="mermaid-view"></div>
<details open><summary>Mermaid source (paste into https://mermaid.live, or render with
<code>mmdc</code>)</summary><pre id="mermaid-src">{html.escape(mermaid)}</pre></details>
{_tables(drawable)}
<script type="module">
const status = document.getElementById("mermaid-status");
try {{
  const {{ default: mermaid }} = await import("{MERMAID_JS}");
  mermaid.initialize({{ startOnLoad: false }});
  const source = document.getElementById("mermaid-src").textContent;
  const {{ svg }} = await mermaid.render("tgagent-mermaid", source);
  document.getElementById("mermaid-view").innerHTML = svg;
  status.textContent = "Drawn by mermaid.js (loaded from the CDN).";
}} catch (err) {{
  status.textContent = "mermaid.js could not be loaded (offline or blocked: " + err +
    "). The SVG above and the source and tables below are complete without it.";
}}
</script>
</body></html>
"""
