"""The main job as a user runs it: scaffold the Strands calculator, train it on SmolLM2 (CPU).

Runs ``osmosis template create calc --template strands`` and ``osmosis train submit
configs/training/calc.toml --json`` in a fresh folder, as subprocesses, with the shipped config
(target: under 15 minutes on 2 cores), and records the wall time, the per-step times and
rewards, and the peak memory of the training process.

Run: ``python -m tests.benchmarks mainjob``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from osmosis_ai.learning import format_summary, summarize_learning
from tests.benchmarks._report import write_section

TARGET_S = 15 * 60
"""The shipped demo config's wall-time budget on 2 CPU cores."""


def _osmosis(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # The installed console script, exactly what a user types.
    exe = Path(sys.executable).with_name("osmosis")
    cmd = [str(exe) if exe.exists() else shutil.which("osmosis") or "osmosis", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench_mainjob_"))
    _osmosis(["template", "create", "calc", "--template", "strands"], work)
    started = time.perf_counter()
    done = _osmosis(["train", "submit", "configs/training/calc.toml", "--json"], work)
    wall = time.perf_counter() - started
    peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2
    result = json.loads(done.stdout)
    records = [
        json.loads(line)
        for line in (Path(result["run"]) / "metrics.jsonl").read_text().splitlines()
        if json.loads(line).get("kind") == "train"
    ]
    rows = "\n".join(
        f"| {r['step']} | {r['step_time_s']:.1f} s | {r['rollout_time_s']:.1f} s | "
        f"{r['train_time_s']:.1f} s | {r['reward_mean']:.3f} | {r['response_length']:.0f} | "
        f"{r['failed_rollouts']:.0f}/{r['rollouts']:.0f} |"
        for r in records
    )
    learning = summarize_learning(records)
    met = result["status"] == "finished" and wall < TARGET_S
    load = os.getloadavg()[0]
    body = (
        "Target: the shipped demo config finishes in under 15 minutes on 2 CPU cores: "
        f"**{'met' if met else 'NOT met'}**.\n\n"
        f"- Result: **{result['status']}**, {result['steps']} steps in **{wall / 60:.1f} min** "
        f"wall (model load and engine start included); median step "
        f"{statistics.median(r['step_time_s'] for r in records):.1f} s; peak RSS of the "
        f"training process {peak_gb:.1f} GB.\n"
        f"- Checkpoint: `{Path(result['last_checkpoint']).name}/adapter` (PEFT format).\n\n"
        "| step | step time | rollouts | update | reward mean | response tokens | failed |\n"
        "|---|---|---|---|---|---|---|\n"
        f"{rows}\n\n"
        + (
            f"The end screen's summary: {format_summary(learning)[0]}.\n\n"
            if learning is not None else ""
        )
        + "How far the reward moves over seeds, and the held-out comparison with the base model: "
        f"the `learning` section. 1-minute load average at the end: {load:.1f} on "
        f"{os.cpu_count()} cores."
    )
    print(body, flush=True)
    write_section(
        "mainjob",
        "Main job: the Strands calculator on the embedded SmolLM2 (CPU)",
        body,
        "python -m tests.benchmarks mainjob",
    )
