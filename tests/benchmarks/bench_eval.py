"""Benchmark: ``osmosis eval run`` of the strands template over 20 rows on the embedded model.

Scaffolds ``osmosis template create calc --template strands`` into a temp workspace and times
``osmosis eval run configs/eval/calc.toml --limit 20`` end to end (process start, model load,
20 agent rollouts through the gateway + HF engine on SmolLM2-135M-Instruct, grading, files).
Run: ``python -m tests.benchmarks eval`` (env ``OSMOSIS_BENCH_EVAL_ROWS`` changes the row count,
``OSMOSIS_BENCH_EVAL_CONCURRENCY`` passes ``--concurrency``). The run goes to
``docs/benchmarks/eval.json`` and the section is rendered from that file
(``python -m tests.benchmarks.bench_eval render`` redoes it without measuring).
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
from typing import Any

from tests.benchmarks._stored import Sitting

NAME = "eval"
TITLE = "osmosis eval run: strands template, 20 rows, embedded model (CPU)"
COMMAND = "python -m tests.benchmarks eval"
CODE = ("core/osmosis_ai/eval", "trainer/osmosis_trainer/engines", "tests/benchmarks/bench_eval.py")
"""What the section measures (its fingerprint)."""
_KNOBS = ("OSMOSIS_BENCH_EVAL_ROWS", "OSMOSIS_BENCH_EVAL_CONCURRENCY")


def _osmosis(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from osmosis_ai.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def _command() -> str:
    """The command with the knobs this sitting ran under (none set: :data:`COMMAND`)."""
    env = [f"{k}={os.environ[k]}" for k in _KNOBS if os.environ.get(k)]
    return " ".join([*env, COMMAND])


def main() -> None:
    rows = int(os.environ.get("OSMOSIS_BENCH_EVAL_ROWS", "20"))
    concurrency = os.environ.get("OSMOSIS_BENCH_EVAL_CONCURRENCY")
    sitting = Sitting.start(NAME, _command(), CODE, rows=rows)
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
    from osmosis_ai.eval._run import DEFAULT_CONCURRENCY

    # The concurrency the run used, resolved as eval run does: the flag, the config, the default.
    configured = eval_toml.get("evaluation", {}).get("concurrency")
    used, source = (
        (int(concurrency), "flag")
        if concurrency
        else (configured, "config")
        if configured
        else (DEFAULT_CONCURRENCY, "default")
    )
    sitting.record(
        {
            "rows": rows,
            "concurrency": used,
            "concurrency_from": source,
            "max_tokens": max_tokens,
            "wall_s": wall,
            "load_start": load,
            "load_end": load_end,
            "model_load_s": out["model_load_s"],
            "summary": out["summary"],
        }
    )
    render()


def _s(ms: Any) -> str:
    """Milliseconds (None or missing: 0, as the summary leaves them out) as seconds."""
    return f"{(ms or 0) / 1000:.1f}"


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/eval.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    if not sitting.runs:
        sitting.write(TITLE, "The sitting stored no run (it stopped before the eval ended).")
        return
    r = sitting.runs[-1]
    s = r["summary"]
    lat = s.get("latency_ms") or {}
    reward = s["reward"]
    mean = "-" if reward.get("mean") is None else f"{reward['mean']:.3f}"
    pass_rate = "-" if s.get("pass_rate") is None else f"{s['pass_rate'] * 100:.0f}%"
    latency = " / ".join(_s(lat.get(k)) for k in ("mean", "p50", "p95", "max"))
    failures = ", ".join(f"{k} {v}" for k, v in s["failures_by_reason"].items()) or "none"
    after = "-" if s.get("wall_time_s") is None else f"{s['wall_time_s']:.1f} s"
    how = {"flag": "`--concurrency`", "config": "the eval config's", "default": "the default"}[
        r["concurrency_from"]
    ]
    body = f"""
`osmosis eval run` of the `strands` calculator template (OsmosisStrandsAgent and its tools)
over {r["rows"]} rows on the embedded SmolLM2-135M-Instruct (HF engine behind the policy
gateway, CPU), concurrency {r["concurrency"]} ({how}), `max_tokens` {r["max_tokens"]} per call
(the template's eval config). Wall time includes process start and model load.

| metric | value |
|---|---|
| wall time, end to end | {r["wall_s"]:.1f} s |
| model load (engine + gateway start) | {r["model_load_s"] or 0:.1f} s |
| eval time after the model is up | {after} |
| samples: success / failed / skipped | {s["success"]} / {s["failed"]} / {s["skipped"]} |
| failures by reason | {failures} |
| mean reward / pass rate | {mean} / {pass_rate} |
| tokens (prompt + completion) | {s["prompt_tokens"]} + {s["completion_tokens"]} |
| rollout latency mean / p50 / p95 / max | {latency} s |
| 1-min load average at start / end | {r["load_start"]:.2f} / {r["load_end"]:.2f} |

The load average shows how much other work shared the machine's cores during the run.
"""
    print(body, flush=True)
    sitting.write(TITLE, body.strip())


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
