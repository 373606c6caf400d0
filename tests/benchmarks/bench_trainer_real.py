"""GRPO step and peak memory on the real model (embedded SmolLM2-135M): ours against TRL 1.16.

The runs themselves are :mod:`tests.benchmarks.bench_trainer`'s (a fresh process each, same
LoRA, loss, reward and prompts on both sides). TRL's rows are labelled with their config:
its defaults (``GRPOConfig``: ``bf16=True`` autocast and ``gradient_checkpointing=True``, also
on CPU) and bf16 without checkpointing; ``trl_fp32`` (fp32, no checkpointing) on request. The
section's step verdict is against the fastest TRL row measured, its memory verdict against
TRL's defaults.

Run: ``python -m tests.benchmarks trainer_real``. Every row runs once per round, rounds
interleaved (A B C A B C: a slow minute on a shared machine does not fall on one row only,
and ratios are paired by round); ``OSMOSIS_BENCH_RUNS`` rounds (default 3, the least a
verdict is written for), ``OSMOSIS_BENCH_STEPS`` timed steps per run after one warm-up
(default 3), ``OSMOSIS_BENCH_ROWS`` the row keys (comma-separated; default
:data:`DEFAULT_ROWS`; see :data:`ROWS`). Each run's result goes to
``docs/benchmarks/trainer_real.json`` as it ends, and the section is rendered from that file
after every round; ``python -m tests.benchmarks.bench_trainer_real render`` renders it again
without measuring (and marks it **stale** when the measured code changed since).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.benchmarks._report import spread, write_readme_block, write_section
from tests.benchmarks._stored import Sitting, stale_note
from tests.benchmarks.bench_trainer import GROUP, PROMPTS, Case, Result, Setup, _model_path, _run

__all__ = ["DEFAULT_ROWS", "ROWS", "main", "render"]

NAME = "trainer_real"
TITLE = "GRPO step and memory on the real model: osmosis vs TRL GRPOTrainer"
TARGET_STEP = 0.40
"""Our on-policy step at most this fraction of TRL's fastest setting's."""
TARGET_MEMORY = 0.40
"""Our peak resident memory at most this fraction of TRL's defaults'."""
MIN_ROUNDS = 3
"""Verdicts are written for at least this many interleaved rounds."""
CODE = (
    "trainer/osmosis_trainer",
    ":!trainer/osmosis_trainer/distributed",  # Ray only: a single-process run never loads it
    "core/osmosis_ai/serving",
    "core/osmosis_ai/rollout",
    "tests/benchmarks/bench_trainer.py",
)
"""What the section measures: its fingerprint covers these files (the rows' settings are
stored with the results; rendering code is not measured)."""

ROWS: dict[str, Setup] = {
    "ours": Setup("osmosis, on-policy (defaults)", profile=True),
    "ours_micro1024": Setup(
        "osmosis, on-policy, 1024-token micro-batches", micro_batch_tokens=1024
    ),
    "ours_micro512": Setup("osmosis, on-policy, 512-token micro-batches", micro_batch_tokens=512),
    "ours_micro256": Setup("osmosis, on-policy, 256-token micro-batches", micro_batch_tokens=256),
    "trl_defaults": Setup(
        "TRL, its defaults (bf16=True autocast, gradient_checkpointing=True)",
        who="trl",
        dtype="bfloat16",
        gradient_checkpointing=True,
    ),
    "trl_bf16": Setup(
        "TRL, bf16=True autocast, gradient_checkpointing=False", who="trl", dtype="bfloat16"
    ),
    "trl_fp32": Setup("TRL, fp32, gradient_checkpointing=False", who="trl"),
    "ahead": Setup("osmosis, rollouts ahead ([algorithm] rollouts_ahead = 1)", ahead=1),
    "fp32": Setup(
        'osmosis, base weights in float32 ([training] dtype = "float32")', dtype="float32"
    ),
    "bf16": Setup(
        'osmosis, base weights in bfloat16 ([training] dtype = "bfloat16")', dtype="bfloat16"
    ),
    "peft_merge": Setup(
        "osmosis, adapters merged by peft's merge_adapter/unmerge_adapter (engine's own weights)",
        without="peft_merge",
    ),
    "merge": Setup("osmosis, adapters served through peft's unmerged layers", without="merge"),
    "openmp": Setup(
        "osmosis, libgomp's default OpenMP waits (the worker's bounded spin not set)",
        without="openmp",
    ),
    "noshare": Setup(
        "osmosis, every sequence whole and padded (transformers' forward; "
        "share_prompt_prefix = false)",
        share_prefix=False,
    ),
}
PATHS: dict[str, tuple[str, bool]] = {
    # row key: (the path the defaults have and this row lacks, judged on wall time alone)
    "ahead": ("on-policy against rollouts ahead (the update thread's overlap)", True),
    # dtype "auto" times a matmul in each dtype on the CPU it runs on (``_cpu_dtype``): run the
    # row of the dtype it did not pick.
    "fp32": ('the dtype "auto" picked, against fp32 base weights', False),
    "bf16": ('the dtype "auto" picked, against bf16 base weights', False),
    "peft_merge": ("our merge (peft's get_delta_weight into kept originals)", False),
    "merge": ("merged adapters (against peft's unmerged layers)", False),
    # Spinning trades CPU time for wall time by design: judged on wall, its CPU shows in the row.
    "openmp": ("the worker's OpenMP waits (against libgomp's defaults)", True),
    "noshare": (
        "a group's prompt once (packed rows, or its cached keys and values), against "
        "transformers' padded forward of every sequence",
        False,
    ),
}
"""Rows that switch one path off: the section writes whether the path pays (>= 10 % of the
step's wall time, and of its CPU time unless it only overlaps work, paired by round)."""
JUDGED_IN = {
    # This case's prompt is 38 tokens with no system prompt; the path exists for the agents'
    # system prompts and tool schemas, repeated in every sequence of a group.
    "noshare": "`update` (the templates' multi-turn batches, where a group shares its system "
    "prompt and tools)",
}
"""Paths whose keep/remove verdict another section writes: here their figure is shown only."""
DEFAULT_ROWS = ("ours", "noshare", "trl_defaults", "trl_bf16", "trl_fp32")
"""The rows run when ``OSMOSIS_BENCH_ROWS`` is unset."""
_DEFAULTS_KEY = "trl_defaults"


def _row_keys() -> list[str]:
    only = os.environ.get("OSMOSIS_BENCH_ROWS")
    keys = list(DEFAULT_ROWS) if not only else [k.strip() for k in only.split(",") if k.strip()]
    unknown = [k for k in keys if k not in ROWS]
    if unknown:
        raise SystemExit(f"OSMOSIS_BENCH_ROWS: unknown {unknown}; known: {list(ROWS)}")
    if "ours" not in keys or _DEFAULTS_KEY not in keys:
        raise SystemExit("OSMOSIS_BENCH_ROWS must include 'ours' and 'trl_defaults'")
    return keys


def _case() -> Case:
    steps = max(1, int(os.environ.get("OSMOSIS_BENCH_STEPS", "3")))
    return Case("real", new_tokens=64, measured=steps, warmup=1, embedded=True, full_length=True)


def _command(keys: list[str], rounds: int, case: Case) -> str:
    env = [f"OSMOSIS_BENCH_RUNS={rounds}", f"OSMOSIS_BENCH_STEPS={case.measured}"]
    if tuple(keys) != DEFAULT_ROWS:
        env.append(f"OSMOSIS_BENCH_ROWS={','.join(keys)}")
    return " ".join(env) + " python -m tests.benchmarks trainer_real"


def main() -> None:
    keys, case = _row_keys(), _case()
    rounds = max(1, int(os.environ.get("OSMOSIS_BENCH_RUNS", "3")))
    root = Path(tempfile.mkdtemp(prefix="bench_trainer_real_"))
    _model_path(case, root)
    sitting = Sitting.start(
        NAME,
        _command(keys, rounds, case),
        CODE,
        rows=keys,
        rounds=rounds,
        case=asdict(case),
        setups={k: asdict(ROWS[k]) for k in keys},
    )
    for done in range(1, rounds + 1):
        for key in keys:
            result = _run(case, ROWS[key], root)
            sitting.record({"row": key, "round": done, "result": asdict(result)})
        render()


# --- rendering: stored results -> section ------------------------------------------------


class _Row:
    def __init__(self, key: str, setup: dict[str, Any], runs: list[dict[str, Any]]) -> None:
        self.key = key
        self.label = str(setup["label"])
        self.who = str(setup["who"])
        self.by_round = {int(r["round"]): Result(**r["result"]) for r in runs}

    def values(self, attr: str) -> list[float]:
        return [v for r in self.by_round.values() if (v := getattr(r, attr)) is not None]

    def median(self, attr: str) -> float:
        values = self.values(attr)
        return statistics.median(values) if values else float("nan")


def _paired(a: _Row, b: _Row, attr: str) -> list[float]:
    """``a / b`` for each round both ran (neighbours in time)."""
    out = []
    for i, x in a.by_round.items():
        y = b.by_round.get(i)
        if y is not None and getattr(x, attr) and getattr(y, attr):
            out.append(getattr(x, attr) / getattr(y, attr))
    return out


def _table(rows: list[_Row], case: Case) -> str:
    lines = [
        "| row | precision | step s, median [min-max] | CPU s/step | peak RSS GB "
        "| generated tokens/step | runs |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        precision = sorted({r.dtype or "-" for r in row.by_round.values()})
        lines.append(
            f"| {row.label} | {', '.join(precision)} | {spread(row.values('step_s'))} "
            f"| {row.median('cpu_s'):.1f} "
            f"| {spread(row.values('peak_rss_gb'))} | {row.median('tokens_per_step'):.0f} "
            f"| {len(row.by_round)} |"
        )
    lines += [
        "",
        f"{PROMPTS} prompts x {GROUP} samples x "
        + (
            f"{case.new_tokens} new tokens per step (every completion runs to this budget: "
            "ours' engine is told of no EOS id, TRL generates with `min_new_tokens`; so every "
            "row does the same work, whatever its samples), "
            if case.full_length
            else f"up to {case.new_tokens} new tokens per step, "
        )
        + f"{case.warmup} warm-up + {case.measured} timed steps per run (a run's step time is the "
        "median of its timed steps); peak RSS is the run's whole process (`ru_maxrss`); CPU "
        "seconds are all threads' per timed step.",
    ]
    return "\n".join(lines)


def _ratio(a: _Row, b: _Row, attr: str) -> tuple[float, list[float]]:
    paired = _paired(a, b, attr)
    return (statistics.median(paired) if paired else float("nan")), paired


def _verdicts(rows: dict[str, _Row], complete: int) -> list[str]:
    ours, defaults = rows["ours"], rows[_DEFAULTS_KEY]
    trl = [r for r in rows.values() if r.who == "trl"]
    fastest = min(trl, key=lambda r: r.median("step_s"))
    decided = complete >= MIN_ROUNDS
    step, step_runs = _ratio(ours, fastest, "step_s")
    cpu, _ = _ratio(ours, fastest, "cpu_s")

    def met(value: float, target: float) -> str:
        if not decided:
            return f"not decided ({complete} complete round(s), {MIN_ROUNDS} needed)"
        return "met" if value <= target else "NOT met"

    lines = [
        f"- TRL's fastest setting measured here: **{fastest.label}** "
        f"({fastest.median('step_s'):.2f} s; settings measured: "
        f"{'; '.join(r.label for r in trl)}).",
        f"- Step: ours (defaults) / TRL's fastest = **{step:.2f}x** wall, paired by round "
        f"{spread(step_runs)}x; CPU time {cpu:.2f}x. Target <= {TARGET_STEP:.2f}x: "
        f"{met(step, TARGET_STEP)}.",
    ]
    for row in (r for r in rows.values() if r.who == "ours"):
        mem, mems = _ratio(row, defaults, "peak_rss_gb")
        line = (
            f"- Memory, {row.label}: peak RSS / TRL's defaults' = **{mem:.2f}x**, paired by "
            f"round {spread(mems)}x (medians {row.median('peak_rss_gb'):.2f} GB of "
            f"{len(row.by_round)} run(s) vs {defaults.median('peak_rss_gb'):.2f} GB). Target <= "
            f"{TARGET_MEMORY:.2f}x: {met(mem, TARGET_MEMORY)}."
        )
        if row is not ours:
            cost, runs = _ratio(row, ours, "step_s")
            cpu_cost, _ = _ratio(row, ours, "cpu_s")
            line += (
                f" Its step costs {cost:.2f}x the defaults' wall (paired {spread(runs)}x), "
                f"{cpu_cost:.2f}x CPU; vs TRL's fastest {_ratio(row, fastest, 'step_s')[0]:.2f}x."
            )
        lines.append(line)
    for key, (path, overlap) in PATHS.items():
        if key in rows and key != "ahead":
            lines.append(
                _path_line(path, rows[key], ours, overlap, decided, JUDGED_IN.get(key))
            )
    if "ahead" in rows:  # the ahead row has the path; the defaults lack it
        lines.append(_path_line(PATHS["ahead"][0], ours, rows["ahead"], True, decided))
    return lines


def _path_line(
    path: str,
    without: _Row,
    with_it: _Row,
    overlap: bool,
    decided: bool,
    judged_in: str | None = None,
) -> str:
    wall, walls = _ratio(without, with_it, "step_s")
    cpu, cpus = _ratio(without, with_it, "cpu_s")
    pays = wall >= 1.10 and (overlap or cpu >= 1.10)
    rule = "wall" if overlap else "wall and CPU"
    outcome = (
        f"{'>=' if pays else '<'} 10 % on this step; kept or removed by the verdict in "
        f"{judged_in}"
        if judged_in
        else "not decided (fewer than 3 complete rounds)"
        if not decided
        else f"pays (>= 10 % on {rule})"
        if pays
        else "gains < 10 %: remove it"
    )
    return (
        f"- Path: {path}: without / with, paired by round: wall {spread(walls)}x, CPU "
        f"{spread(cpus)}x ({without.label}: {without.median('step_s'):.2f} s) -> {outcome}."
    )


def _phase_table(row: _Row) -> str:
    by_phase: dict[str, list[dict[str, Any]]] = {}
    for run in row.by_round.values():
        for ph in run.phases or []:
            by_phase.setdefault(ph["phase"], []).append(ph)
    if not by_phase:
        return ""
    lines = [
        f"Where the step of '{row.label}' goes (per timed step, median over runs):",
        "",
        "| phase | CPU s/step | wall s/step | peak RSS in phase |",
        "|---|---|---|---|",
    ]
    for name, phs in by_phase.items():
        med = {k: statistics.median(p[k] for p in phs) for k in phs[0] if k != "phase"}
        lines.append(
            f"| {name} | {med['cpu_s']:.2f} | {med['wall_s']:.2f} | {med['peak_rss_gb']:.2f} GB |"
        )
    return "\n".join(lines)


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/trainer_real.json``."""
    if not Sitting.exists(NAME):
        keys, case = list(DEFAULT_ROWS), _case()
        write_section(
            NAME,
            TITLE,
            "No stored results for this section: nothing in it has been measured on the code "
            f"it describes. Run the command above (it stores `docs/benchmarks/{NAME}.json`).",
            _command(keys, 3, case),
            machine_text="-",
            date="-",
        )
        return
    sitting = Sitting.load(NAME)
    data = sitting.data
    case = Case(**data["case"])
    rows = {
        key: _Row(key, data["setups"][key], [r for r in sitting.runs if r["row"] == key])
        for key in data["rows"]
    }
    complete = min(len(r.by_round) for r in rows.values())
    loads = [float(r["load"]) for r in sitting.runs]
    verdicts = (
        _verdicts(rows, complete)
        if complete
        else ["- No verdicts: not every row has a finished run yet."]
    )
    body = "\n".join(
        [
            stale_note(sitting)
            + f"Code: {data['commit']}"
            + (
                f" with uncommitted changes to {', '.join(data['uncommitted'])}"
                if data["uncommitted"]
                else ""
            )
            + f" (fingerprint {data['fingerprint']}); {complete} complete interleaved round(s) of "
            f"{data['rounds']}; 1-minute load average at the runs' ends {spread(loads, '{:.1f}')} "
            f"(from {data['load_at_start']} at the start); raw runs: "
            f"`docs/benchmarks/{NAME}.json`.",
            "",
            *verdicts,
            "",
            _table(list(rows.values()), case),
            "",
            _phase_table(rows["ours"]),
        ]
    )
    print(body, flush=True)
    write_section(
        NAME,
        TITLE,
        body,
        data["command"],
        machine_text=data["machine"],
        date=f"{data['started']} to {data.get('ended', data['started'])}",
    )
    write_readme_block("trainer-real-readme", readme_block(data, complete, verdicts))


def readme_block(data: dict[str, Any], complete: int, verdicts: list[str]) -> str:
    """What README.md quotes of the last sitting: when, where, and its verdicts on step time
    and memory (the speed paths' lines stay in BENCHMARKS.md)."""
    head = (
        f"Last sitting ({data['started']}, {complete} interleaved round(s), "
        f"{data['machine'].split(', torch')[0]}; `BENCHMARKS.md`, `trainer_real`, has the rows "
        "and where the step goes):"
    )
    return "\n".join([head, "", *(v for v in verdicts if not v.startswith("- Path:"))])


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
