"""Run benchmarks: ``python -m tests.benchmarks [name ...]`` (all when no name is given).

Each ``bench_<name>.py`` module in this folder defines ``main() -> None`` that measures and
calls ``_report.write_section``. Afterwards (and alone: ``python -m tests.benchmarks stale``)
every section whose measured code changed since its committed results is marked **stale**
(``_staleness``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from tests.benchmarks._staleness import mark_stale

    here = Path(__file__).parent
    if argv == ["stale"]:
        names: list[str] = []
    else:
        names = argv or sorted(p.stem.removeprefix("bench_") for p in here.glob("bench_*.py"))
    for name in names:
        print(f"== benchmark {name}", flush=True)
        importlib.import_module(f"tests.benchmarks.bench_{name}").main()
    stale = mark_stale()
    print(f"sections marked stale: {', '.join(stale) or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
