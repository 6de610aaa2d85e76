"""Run a benchmark: `python -m bench NAME [options]` (the names: `BENCHMARKS`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence


def _storage(argv: Sequence[str]) -> int:
    from bench.storage_bench import main

    return main(argv)


def _turns(argv: Sequence[str]) -> int:
    from bench.turns import main

    return main(argv)


def _recall(argv: Sequence[str]) -> int:
    from bench.recall import main

    return main(argv)


def _delivery(argv: Sequence[str]) -> int:
    from bench.delivery import main

    return main(argv)


def _live(argv: Sequence[str]) -> int:
    from bench.live import main

    return main(argv)


def _media(argv: Sequence[str]) -> int:
    from bench.media import main

    return main(argv)


def _memory(argv: Sequence[str]) -> int:
    from bench.memory_load import main

    return main(argv)


def _budget(argv: Sequence[str]) -> int:
    from bench.budget import main

    return main(argv)


def _startup(argv: Sequence[str]) -> int:
    from bench.startup import main

    return main(argv)


def _typed(argv: Sequence[str]) -> int:
    from bench.typed_lines import main

    return main(argv)


def _mcp(argv: Sequence[str]) -> int:
    from bench.mcp_tools import main

    return main(argv)


BENCHMARKS: dict[str, Callable[[Sequence[str]], int]] = {
    "storage": _storage,
    "turns": _turns,
    "recall": _recall,
    "delivery": _delivery,
    "live": _live,
    "media": _media,
    "memory": _memory,
    "budget": _budget,
    "startup": _startup,
    "mcp": _mcp,
    "typed": _typed,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to the named benchmark, passing the remaining arguments on."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in BENCHMARKS:
        print(f"usage: python -m bench {{{','.join(BENCHMARKS)}}} [options]", file=sys.stderr)
        return 2
    return BENCHMARKS[args[0]](args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
