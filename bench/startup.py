"""Start-up CPU: `python -m bench startup [--repeat N]` (or `tgagent bench startup`).

Runs the `tgagent` command as a user does, each time a new process, and reports the CPU
time (user + system) of that process and the wall time:
- `tgagent --help`, to its end;
- `tgagent chat` on a terminal (a pseudo-terminal), until it shows its first prompt (read
  from /proc, so on Linux only), and until it has exited after `/exit` typed at once: the
  whole start (imports, the database pool, the graph) and its close.

The chat's database is a fresh schema on DATABASE_URL / PG_HOST, or on a temporary embedded
server (started by the bench, so its CPU is not the chat's); the first start, which migrates
the empty schema, is reported apart. The model endpoint is the bench's model server; no
model is called. The process runs in an empty directory (no `.env`) with the settings'
defaults otherwise. `--checkout DIR` measures the `src` of another source checkout (an
older version, say) with this Python's packages. Timings are reported here, never asserted
in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import fresh_schema, server
from bench.model_server import ROOT, ModelServerProcess

PROMPT = b"you> "
WAIT_SECONDS = 300.0


def tgagent_command(checkout: Path | None = None) -> list[str]:
    """Return the command that runs `tgagent`: the installed script beside this Python,
    else (or for another checkout) `python -m src.cli`."""
    script = Path(sys.executable).with_name("tgagent")
    if checkout is None and script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "src.cli"]


def _environment(dsn: str, model_url: str, checkout: Path | None) -> dict[str, str]:
    keep = ("PATH", "HOME", "TMPDIR", "LD_LIBRARY_PATH")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    return env | {
        "PYTHONPATH": str(checkout or ROOT),
        "LANG": "C.UTF-8",
        "DATABASE_URL": dsn,
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "bench",
    }


def _reap(proc: subprocess.Popen[bytes]) -> float:
    """Wait for `proc` and return the CPU seconds it used (its waited-for children too)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def cpu_so_far(pid: int) -> float | None:
    """Return the CPU seconds process `pid` has used so far, from /proc (None elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    # After the command's name: state is field 3, utime 14 and stime 15 (proc(5)).
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def time_help(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Return (CPU, wall) seconds of `tgagent --help`."""
    started = time.perf_counter()
    proc = subprocess.Popen([*command, "--help"], cwd=cwd, env=env, stdout=subprocess.DEVNULL)
    cpu = _reap(proc)
    if proc.returncode != 0:
        raise RuntimeError(f"tgagent --help exited with {proc.returncode}")
    return cpu, time.perf_counter() - started


def time_chat(command: list[str], cwd: Path, env: dict[str, str]) -> dict[str, float | None]:
    """Start `tgagent chat` on a pseudo-terminal, type `/exit` at its first prompt; return
    CPU and wall seconds to the prompt and to the process's end."""
    master, slave = pty.openpty()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*command, "chat", "--lang", "en"],
        cwd=cwd,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    seen = b""
    prompt_cpu: float | None = None
    prompt_wall: float | None = None
    try:
        while True:
            ready, _, _ = select.select([master], [], [], WAIT_SECONDS)
            if not ready:
                raise RuntimeError(f"tgagent chat showed nothing for {WAIT_SECONDS} s: {seen!r}")
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the process ended and closed the terminal
                break
            if not chunk:
                break
            seen += chunk
            if prompt_wall is None and PROMPT in seen:
                prompt_cpu = cpu_so_far(proc.pid)
                prompt_wall = time.perf_counter() - started
                os.write(master, b"/exit\n")
    finally:
        os.close(master)
        total_cpu = _reap(proc)
    if prompt_wall is None or proc.returncode != 0:
        raise RuntimeError(f"tgagent chat exited with {proc.returncode}: {seen.decode()!r}")
    return {
        "prompt_cpu": prompt_cpu,
        "prompt_wall": prompt_wall,
        "total_cpu": total_cpu,
        "total_wall": time.perf_counter() - started,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Return the figures: per measure, its values over `args.repeat` runs."""
    command = tgagent_command(args.checkout)
    model = ModelServerProcess().start()
    try:
        with server() as (base, label), tempfile.TemporaryDirectory() as tmp:
            async with fresh_schema(base, "bench_startup") as (dsn, _schema):
                env = _environment(dsn, model.base_url, args.checkout)
                cwd = Path(tmp)
                first = await asyncio.to_thread(time_chat, command, cwd, env)
                helps, chats = [], []
                for _ in range(args.repeat):
                    helps.append(await asyncio.to_thread(time_help, command, cwd, env))
                    chats.append(await asyncio.to_thread(time_chat, command, cwd, env))
    finally:
        model.stop()
    where = f" from {args.checkout}" if args.checkout else ""
    return {
        "database": label,
        "command": " ".join(command) + where,
        "first_start_cpu": first["total_cpu"],
        "help_cpu": [cpu for cpu, _ in helps],
        "help_wall": [wall for _, wall in helps],
        **{key: [chat[key] for chat in chats] for key in chats[0]},
    }


def _median(values: Sequence[float | None]) -> str:
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):.2f} s" if known else "n/a (no /proc)"


def render(result: dict[str, Any], repeat: int) -> str:
    """Return the report: the median of each measure."""
    return "\n".join(
        [
            f"`{result['command']}`, {repeat} runs each, median; database: {result['database']}",
            f"tgagent --help:                  CPU {_median(result['help_cpu'])}, "
            f"wall {_median(result['help_wall'])}",
            f"tgagent chat, its first prompt:  CPU {_median(result['prompt_cpu'])}, "
            f"wall {_median(result['prompt_wall'])}",
            f"tgagent chat, start and /exit:   CPU {_median(result['total_cpu'])}, "
            f"wall {_median(result['total_wall'])}",
            f"tgagent chat, first start (migrating an empty database): CPU "
            f"{result['first_start_cpu']:.2f} s",
        ]
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command (5)")
    parser.add_argument(
        "--checkout", type=Path, help="measure this source checkout's `src` (default: this one)"
    )


async def _command(args: argparse.Namespace, settings: Any) -> int:
    print(render(await run(args), args.repeat))
    return 0


def register(sub: Any) -> None:
    """Add `tgagent bench startup [options]` to `tgagent bench`'s subcommands."""
    parser = sub.add_parser(
        "startup",
        help="CPU until `tgagent --help` answers and `tgagent chat` shows its prompt",
        description=__doc__.splitlines()[0],
    )
    add_arguments(parser)
    parser.set_defaults(handler=_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the start-up bench from the command line."""
    parser = argparse.ArgumentParser(prog="python -m bench startup", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    print(render(asyncio.run(run(args)), args.repeat))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
