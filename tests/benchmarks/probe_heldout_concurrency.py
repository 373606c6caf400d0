"""How many held-out rollouts to run at once: the held-out eval of one trained checkpoint at
two concurrency settings, interleaved, appended to ``docs/heldout_concurrency.jsonl``.

The measurement behind ``[heldout]``'s default concurrency (``eval/_heldout.py``: a training
step's concurrency, 32 on the quick start, rather than the eval's default of 8): on 2 CPU cores
the HF engine batches the rollouts in flight, so more of them keep the batch full while long
multi-turn rollouts finish.

Run it in a quick-start workspace with a finished run::

    python -m tests.benchmarks.probe_heldout_concurrency WORKSPACE RUN [ROUNDS] [C1,C2]

(defaults: 2 rounds of 32 and 8). Each eval is ``osmosis eval run configs/eval/calc.toml
--model RUN --dataset-file data/calc_heldout.jsonl --n 1 --concurrency C``, a subprocess as a
user runs it; a row records its wall time (with the model load), the eval's own wall time, the
pass rate, the load average before it and the CPU.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tests.benchmarks._report import ROOT, cpu_info
from tests.benchmarks.bench_learning import _osmosis

OUT = ROOT / "docs" / "heldout_concurrency.jsonl"
HELDOUT = "data/calc_heldout.jsonl"


def measure(ws: Path, run: str, concurrency: int, round_: int) -> dict[str, Any]:
    """One held-out eval of ``run`` at ``concurrency`` rollouts in flight."""
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = _osmosis(
        ["eval", "run", "configs/eval/calc.toml", "--model", run, "--dataset-file", HELDOUT,
         "--n", "1", "--concurrency", str(concurrency), "--json"],
        ws,
    )
    wall = time.perf_counter() - started
    report = json.loads(done.stdout)
    summary = report.get("summary") or {}
    return {
        "concurrency": concurrency,
        "round": round_,
        "wall_s": round(wall, 1),
        "load_before": round(load, 2),
        "pass_rate": summary.get("pass_rate"),
        "eval_wall_s": summary.get("wall_time_s"),
        "samples": summary.get("samples"),
        "checkpoint": f"{run} in {ws}, {HELDOUT}, n=1",
        "cpu": cpu_info(),
    }


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit(__doc__)
    ws, run = Path(argv[0]), argv[1]
    rounds = int(argv[2]) if len(argv) > 2 else 2
    settings = [int(c) for c in (argv[3] if len(argv) > 3 else "32,8").split(",")]
    for round_ in range(1, rounds + 1):
        for concurrency in settings:  # interleaved: a slow minute does not hit one setting only
            row = measure(ws, run, concurrency, round_)
            with OUT.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
