"""A training run's held-out evals: every file at once on one engine per model, against one file
after another with an engine each (what ``run_heldout`` did before).

Workload: the quick start's four held-out files (``[heldout.datasets]`` of the strands template,
80 rows, one sample each) evaluated with its warm-start checkpoint (``RUN:warm``: it calls the
tools and carries results about as often as RL starts from, so its rollouts are the multi-turn
ones the held-out evals run), at the concurrency ``[heldout]`` picks (a training step's, 32),
embedded SmolLM2-135M-Instruct on the HF engine. The checkpoint comes from the template's own
training with ``max_steps = 0`` (its warm start alone). ``ROUNDS`` interleaved rounds, the order
alternating; every eval into a fresh folder, the engine loads counted in both rows.

Run: ``python -m tests.benchmarks heldout_files``; each run goes to
``docs/benchmarks/heldout_files.json`` as it ends and the section is rendered from that file
(``python -m tests.benchmarks.bench_heldout_files render``).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from tests.benchmarks._report import spread, write_section
from tests.benchmarks._stored import Sitting, stale_note
from tests.benchmarks.bench_learning import _osmosis, scaffold, set_toml

NAME = "heldout_files"
TITLE = "Held-out evals: all files at once on one engine against one file after another"
COMMAND = "python -m tests.benchmarks heldout_files"
CODE = (
    "core/osmosis_ai/eval/_heldout.py", "core/osmosis_ai/eval/_run.py",
    "trainer/osmosis_trainer/engines", "tests/benchmarks/bench_heldout_files.py",
)
"""What the section measures (its fingerprint)."""
ROUNDS = 3
CONCURRENCY = 32
_LABELS = {"at_once": "every file at once, one engine (`run_heldout` now)",
           "one_by_one": "one file after another, an engine each (before)"}


def _warm_run(ws: Path) -> tuple[str, dict[str, str]]:
    """Train the template's warm start alone; its checkpoint name and the held-out files."""
    config = ws / "configs" / "training" / "calc.toml"
    text = config.read_text()
    files: dict[str, str] = tomllib.loads(text)["heldout"]["datasets"]
    config.write_text(text[: text.index("[heldout]")])  # the benchmark runs the evals itself
    set_toml(config, "training.max_steps", "0")
    done = _osmosis(["train", "submit", "configs/training/calc.toml", "--json"], ws)
    return f"{Path(json.loads(done.stdout)['run']).name}:warm", files


async def _measure(ws: Path, model: str, files: dict[str, str], mode: str) -> dict[str, Any]:
    from osmosis_ai.eval import EvalOptions, HeldOutPlan, HeldOutSet, run_eval
    from osmosis_ai.eval._heldout import _each_file

    eval_config = ws / "configs" / "eval" / "calc.toml"
    plan = HeldOutPlan(
        eval_config=eval_config, n=1, concurrency=CONCURRENCY,
        sets=tuple(HeldOutSet(name, ws / path) for name, path in files.items()),
    )
    out = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=ws))
    options = [
        EvalOptions(model=model, n=1, output=out / held.name, dataset_file=held.dataset,
                    concurrency=CONCURRENCY)
        for held in plan.sets if held.name is not None
    ]
    started = time.perf_counter()
    if mode == "at_once":
        results = await _each_file(plan, options, None)
    else:
        results = [await run_eval(eval_config, o) for o in options]
    wall = time.perf_counter() - started
    return {
        "wall_s": round(wall, 2),
        "samples": sum(r.summary.success + r.summary.failed for r in results),
        "pass": {o.output.name: r.summary.pass_rate
                 for o, r in zip(options, results, strict=True) if o.output is not None},
        "calls_per_rollout": statistics.fmean(r.summary.turns_per_rollout or 0.0
                                              for r in results),
    }


def main() -> None:
    from osmosis_trainer.models import training_dtype

    ws = scaffold(Path(tempfile.mkdtemp(prefix="heldout-files-")))
    model, files = _warm_run(ws)
    sitting = Sitting.start(NAME, COMMAND, CODE, rounds=ROUNDS,
                            dtype=training_dtype("auto", "cpu"))
    for r in range(ROUNDS):
        for mode in (("at_once", "one_by_one") if r % 2 == 0 else ("one_by_one", "at_once")):
            result = asyncio.run(_measure(ws, model, files, mode))
            sitting.record({"mode": mode, "round": r, "result": result})
            print(_LABELS[mode], r, result, flush=True)
    render()


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/heldout_files.json``."""
    if not Sitting.exists(NAME):
        write_section(NAME, TITLE, "No stored results: run the command above.", COMMAND,
                      machine_text="-", date="-")
        return
    sitting = Sitting.load(NAME)
    runs: dict[str, list[dict[str, Any]]] = {"at_once": [], "one_by_one": []}
    for run in sitting.runs:
        runs[run["mode"]].append(run["result"])
    walls = {k: [r["wall_s"] for r in v] for k, v in runs.items()}
    ratio = [b / a for a, b in zip(walls["at_once"], walls["one_by_one"], strict=False)]
    rows = "\n".join(
        f"| {_LABELS[k]} | {spread(walls[k])} | {statistics.median(r['samples'] for r in v):.0f} "
        f"| {statistics.fmean(statistics.fmean(r['pass'].values()) for r in v):.2f} "
        f"| {statistics.fmean(r['calls_per_rollout'] for r in v):.2f} | {len(v)} |"
        for k, v in runs.items() if v
    )
    if len(ratio) >= 3:
        gain = 1 - 1 / statistics.median(ratio)
        verdict = (f"all files at once saves {gain:.0%} of the wall time: "
                   + ("pays (>= 10 %)" if gain >= 0.10 else "does NOT pay (< 10 %): remove it"))
    else:
        verdict = f"{len(ratio)} paired round(s): no verdict below 3"
    data = sitting.data
    body = (
        stale_note(sitting)
        + f"Code: {data['commit']} (fingerprint {data['fingerprint']}); load average at the "
        f"start {data['load_at_start']}, at the end {data.get('load_at_end', '-')}; raw runs: "
        f"`docs/benchmarks/{NAME}.json`.\n\n"
        "The quick start's four held-out files (80 rows, one sample each) evaluated with its "
        "warm-start checkpoint (`RUN:warm`, from the template's training with `max_steps = 0`), "
        f"{CONCURRENCY} rollouts in flight per file, embedded SmolLM2-135M-Instruct in "
        f"`dtype = \"auto\"` ({data['dtype']} here). Interleaved rounds, the order alternating; "
        "the engine loads count in both rows.\n\n"
        "| held-out evals | wall s, median [min-max] | samples | mean pass | policy calls per "
        "rollout | runs |\n|---|---|---|---|---|---|\n"
        + rows + "\n\n"
        f"one after another / at once, paired by round: {', '.join(f'{x:.2f}x' for x in ratio)}; "
        f"{verdict}. Each model of a run's `[heldout]` comparison (trained, base, warm start) "
        "runs this way (section `learning`).\n"
    )
    print(body, flush=True)
    write_section(NAME, TITLE, body, COMMAND, machine_text=data["machine"],
                  date=f"{data['started']} to {data.get('ended', data['started'])}")


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
