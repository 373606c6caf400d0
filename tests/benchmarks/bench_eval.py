"""Benchmark: ``osmosis eval run`` of the strands template over 20 rows on the embedded model.

Scaffolds ``osmosis template create calc --template strands`` into a temp workspace and times
``osmosis eval run configs/eval/calc.toml --limit 20`` end to end (process start, model load,
20 agent rollouts through the gateway + HF engine on SmolLM2-135M-Instruct, grading, files).
Run: ``python -m tests.benchmarks eval`` (env ``OSMOSIS_BENCH_EVAL_ROWS`` changes the row count).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from tests.benchmarks._report import write_section


def _osmosis(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from osmosis_ai.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def main() -> None:
    rows = int(os.environ.get("OSMOSIS_BENCH_EVAL_ROWS", "20"))
    concurrency = os.environ.get("OSMOSIS_BENCH_EVAL_CONCURRENCY")
    with tempfile.TemporaryDirectory(prefix="osmosis-bench-eval-") as tmp:
        ws = Path(tmp)
        created = _osmosis("template", "create", "calc", "--template", "strands", cwd=ws)
        if created.returncode != 0:
            raise SystemExit(f"template create failed: {created.stderr}")
        eval_toml = tomllib.loads((ws / "configs" / "eval" / "calc.toml").read_text())
        max_tokens = eval_toml["sampling"]["max_tokens"]
        args = ["eval", "run", "configs/eval/calc.toml", "--limit", str(rows), "--json"]
        if concurrency:
            args += ["--concurrency", concurrency]
        load = os.getloadavg()[0]
        started = time.perf_counter()
        proc = _osmosis(*args, cwd=ws)
        wall = time.perf_counter() - started
        load_end = os.getloadavg()[0]
        if proc.returncode != 0:
            raise SystemExit(f"eval run failed ({proc.returncode}): {proc.stderr[-2000:]}")
        out = json.loads(proc.stdout)
    s = out["summary"]
    lat = s.get("latency_ms") or {}
    reward = s["reward"]
    mean = "-" if reward["mean"] is None else f"{reward['mean']:.3f}"
    pass_rate = "-" if s["pass_rate"] is None else f"{s['pass_rate'] * 100:.0f}%"
    failures = ", ".join(f"{k} {v}" for k, v in s["failures_by_reason"].items()) or "none"
    body = f"""
`osmosis eval run` of the `strands` calculator template (OsmosisStrandsAgent, 4 tools) over
{rows} rows on the embedded SmolLM2-135M-Instruct (HF engine behind the policy gateway, CPU),
default concurrency (8), `max_tokens` {max_tokens} per call (the template's eval config). Wall time includes process start and model load.

| metric | value |
|---|---|
| wall time, end to end | {wall:.1f} s |
| model load (engine + gateway start) | {out["model_load_s"] or 0:.1f} s |
| eval time after the model is up | {s["wall_time_s"]:.1f} s |
| samples: success / failed / skipped | {s["success"]} / {s["failed"]} / {s["skipped"]} |
| failures by reason | {failures} |
| mean reward / pass rate | {mean} / {pass_rate} |
| tokens (prompt + completion) | {s["prompt_tokens"]} + {s["completion_tokens"]} |
| rollout latency mean / p50 / p95 / max | {lat.get("mean", 0) / 1000:.1f} / {lat.get("p50", 0) / 1000:.1f} / {lat.get("p95", 0) / 1000:.1f} / {lat.get("max", 0) / 1000:.1f} s |
| 1-min load average at start / end | {load:.2f} / {load_end:.2f} |

The load average shows how much other work shared the machine's cores during the run.
"""
    write_section(
        "eval",
        "osmosis eval run: strands template, 20 rows, embedded model (CPU)",
        body,
        "python -m tests.benchmarks eval",
    )
    print(body)


if __name__ == "__main__":
    main()
