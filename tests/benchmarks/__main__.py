"""Run benchmarks: ``python -m tests.benchmarks [name ...]`` (all when no name is given).

Each ``bench_<name>.py`` module in this folder defines ``main() -> None`` that measures, stores
its raw runs and renders its BENCHMARKS.md section from them. ``python -m tests.benchmarks
stale`` measures nothing: it re-renders every section from its stored results against today's
code (``_staleness``) and names the sections that say **stale**.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from tests.benchmarks._staleness import rerender, stale_sections

    here = Path(__file__).parent
    every = sorted(p.stem.removeprefix("bench_") for p in here.glob("bench_*.py"))
    if argv == ["stale"]:
        rerender(every)
    else:
        unknown = [name for name in argv if name not in every]
        if unknown:
            known = ", ".join(every)
            print(
                f"unknown benchmark {', '.join(unknown)}; known: {known} (or 'stale')",
                file=sys.stderr,
            )
            return 2
        for name in argv or every:
            print(f"== benchmark {name}", flush=True)
            importlib.import_module(f"tests.benchmarks.bench_{name}").main()
    print(f"sections that say stale: {', '.join(stale_sections()) or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
