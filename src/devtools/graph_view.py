"""`tgagent graph`: the compiled graph's nodes and edges as Mermaid, ASCII, HTML or PNG."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.runnables.graph import Graph
from langgraph.checkpoint.base import BaseCheckpointSaver

from src.config import Settings
from src.devtools.common import EXIT_ENVIRONMENT, DevtoolsError
from src.graph.deps import GraphDeps
from src.graph.main_graph import build_graph
from src.storage.conversation_repo import ConversationRepository
from src.storage.memory_repo import MemoryRepository
from src.storage.pg_client import make_pool
from src.storage.search_repo import SearchRepository
from src.storage.users_repo import UsersRepository

# A DSN that is never connected to: the graph's structure needs no I/O.
_NOWHERE = "postgresql://tgagent-offline.invalid/none"
PNG_HELP = (
    "PNG needs a local renderer, and none was found on PATH. Install one of:\n"
    "  - mermaid-cli: npm install -g @mermaid-js/mermaid-cli   (provides `mmdc`)\n"
    "  - Graphviz:    apt-get install graphviz / brew install graphviz   (provides `dot`)\n"
    "or use --format html (opens in a browser) or --format mermaid (paste into "
    "https://mermaid.live). LangGraph's own draw_mermaid_png() is not used: it sends the "
    "graph to the mermaid.ink web service."
)


class _OfflineChatModel(GenericFakeChatModel):
    """A chat model that is never called; it only has to accept bound tools."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


def offline_graph(settings: Settings, checkpointer: BaseCheckpointSaver[Any] | None = None) -> Any:
    """Compile the real graph over a never-opened pool and a fake model (no I/O)."""
    pool = make_pool(_NOWHERE)  # created closed; never opened
    model = _OfflineChatModel(messages=iter(()))
    deps = GraphDeps(
        settings=settings,
        conversations=ConversationRepository(pool, settings.max_storage),
        users=UsersRepository(pool),
        memory=MemoryRepository(pool),
        search=SearchRepository(pool),
        chat_model=model,
        summary_model=model,
    )
    return build_graph(deps, checkpointer=checkpointer)


@dataclass(frozen=True)
class Edge:
    """One edge of the drawn graph; `conditional` edges are chosen by a router."""

    source: str
    target: str
    conditional: bool


def nodes_and_edges(drawable: Graph) -> tuple[list[str], list[Edge]]:
    """Return node names in the graph's order and its edges."""
    nodes = [node.id for node in drawable.nodes.values()]
    edges = [Edge(e.source, e.target, bool(e.conditional)) for e in drawable.edges]
    return nodes, edges


def node_tools(drawable: Graph) -> dict[str, list[str]]:
    """Return the names of the tools each tool-running node offers."""
    found = {}
    for node in drawable.nodes.values():
        tools = (node.metadata or {}).get("__tools")
        if tools:
            names = tools if isinstance(tools, list | tuple) else [tools]
            found[node.id] = [str(t) for t in names]
    return found


def node_notes(drawable: Graph) -> dict[str, str]:
    """Return extra facts per node (the tools node lists its tools)."""
    return {name: "tools: " + ", ".join(tools) for name, tools in node_tools(drawable).items()}


def render_ascii(drawable: Graph) -> str:
    """Draw with grandalf when installed, else list each node with where it goes next."""
    try:
        return drawable.draw_ascii()
    except ImportError:
        pass
    nodes, edges = nodes_and_edges(drawable)
    notes = node_notes(drawable)
    width = max(len(n) for n in nodes)
    lines = [
        "(grandalf is not installed, so the graph is listed rather than drawn)",
        "  -->  always taken      -.->  chosen by a router",
        "",
    ]
    for name in nodes:
        note = f"   [{notes[name]}]" if name in notes else ""
        for conditional, arrow in ((False, "--> "), (True, "-.->")):
            out = [e.target for e in edges if e.source == name and e.conditional == conditional]
            if out:
                lines.append(f"  {name:<{width}}  {arrow} {' | '.join(out)}{note}")
                note = ""
    return "\n".join(lines)


def find_png_renderer() -> tuple[str, str] | None:
    """Return (kind, executable) of a local renderer: mermaid-cli first, then Graphviz."""
    for kind, exe in (("mmdc", "mmdc"), ("dot", "dot")):
        path = shutil.which(exe)
        if path:
            return kind, path
    return None


def to_dot(drawable: Graph) -> str:
    """Return the graph in Graphviz DOT (conditional edges dashed)."""
    nodes, edges = nodes_and_edges(drawable)
    lines = ["digraph tgagent {", '  node [shape=box, style="rounded"];']
    for name in nodes:
        shape = ", shape=oval" if name in ("__start__", "__end__") else ""
        lines.append(f'  "{name}" [label="{name}"{shape}];')
    for e in edges:
        style = " [style=dashed]" if e.conditional else ""
        lines.append(f'  "{e.source}" -> "{e.target}"{style};')
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_png(drawable: Graph, out: Path) -> str:
    """Write a PNG with a local renderer; return which one was used (blocking)."""
    found = find_png_renderer()
    if found is None:
        raise DevtoolsError(PNG_HELP, EXIT_ENVIRONMENT)
    kind, exe = found
    with tempfile.TemporaryDirectory(prefix="tgagent-graph-") as tmp:
        if kind == "mmdc":
            source = Path(tmp) / "graph.mmd"
            source.write_text(drawable.draw_mermaid(), encoding="utf-8")
            args = [exe, "-i", str(source), "-o", str(out)]
        else:
            source = Path(tmp) / "graph.dot"
            source.write_text(to_dot(drawable), encoding="utf-8")
            args = [exe, "-Tpng", str(source), "-o", str(out)]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0 or not out.exists():
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise DevtoolsError(
            f"{kind} failed (exit {proc.returncode}): {detail[-1] if detail else 'no output'}",
            EXIT_ENVIRONMENT,
        )
    return kind
