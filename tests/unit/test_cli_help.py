"""`tgagent --help` and every command's: quick to answer, complete, worded for users."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from src.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]

# What a command loads when it runs, never to show its help.
HEAVY = (
    "langchain_core",
    "langchain_openai",
    "langgraph",
    "openai",
    "psycopg",
    "psycopg_pool",
    "telegram",
    "numpy",
    "tornado",
    "pgserver",
)
# Words of the code and of the project's history, not the user's.
INTERNAL = re.compile(
    r"\bseed[ -]?\d{3}\b|\bissues?\s+#?\d+|\(#\d+\)|register\(|handler=|argparse\.|\bdb_sub\b",
    re.IGNORECASE,
)
LOADED_AFTER_HELP = """
import contextlib, io, json, sys
from src.cli import build_parser

for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        build_parser().parse_args(argv)
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in sys.argv[2:])))
"""


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Yield (command, parser) for `tgagent` and each of its commands, however deep."""
    todo = [("tgagent", build_parser())]
    while todo:
        name, parser = todo.pop()
        parser.format_help()  # a command may add its arguments only when they are shown
        yield name, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {sub}", p) for sub, p in action.choices.items()]


def test_help_loads_none_of_the_commands_libraries() -> None:
    """`tgagent --help` and each command's `--help` (but the benches') import nothing heavy:
    a new process, as the `tgagent` command starts."""
    commands = [name.split()[1:] for name, _ in parsers() if " bench" not in name]
    helps = [[*command, "--help"] for command in commands]
    result = subprocess.run(
        [sys.executable, "-c", LOADED_AFTER_HELP, json.dumps(helps), *HEAVY],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(result.stdout) == []
    assert ["--help"] in helps and ["chat", "--help"] in helps
    assert ["db", "migrate", "--help"] in helps


def test_every_help_is_worded_for_users() -> None:
    for name, parser in parsers():
        text = parser.format_help()
        assert not INTERNAL.search(text), f"`{name} --help`: {INTERNAL.search(text)}"


def test_usage_names_every_subcommand() -> None:
    """A usage line lists every subcommand the parser has (`tgagent bench --help` once named
    3 of its 6)."""
    seen = 0
    for name, parser in parsers():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                usage = " ".join(parser.format_help().split())
                for sub in action.choices:
                    assert re.search(rf"[{{,]{sub}[,}}]", usage), f"`{name} --help` omits {sub}"
                    seen += 1
    assert seen >= 20


def test_bench_lists_its_benches() -> None:
    bench = dict(parsers())["tgagent bench"]
    text = bench.format_help()
    for sub in ("recall", "delivery", "live", "media", "memory", "budget", "startup"):
        assert f"    {sub} " in text, sub
