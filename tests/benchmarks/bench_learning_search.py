"""Learning on the ``search`` template: does RL teach the embedded SmolLM2-135M to read the right
document, an OpenAI Agents SDK agent over a SQLite/FTS5 knowledge base?

``python -m tests.benchmarks learning_search`` runs the template as a user does
(``osmosis template create kb --template search`` then ``osmosis train submit
configs/training/kb.toml``, subprocesses, in a scratch workspace) ``RUNS_PER_SEED`` times per
seed with the shipped config (only the seed set): a warm start on the
template's demonstrations, RL, then the run's own ``[heldout]`` eval of the base model, the warm
start (``RUN:warm``) and the trained adapter on two files of 32 questions about documents no
training row reads: ``validation`` (a setting of the template was chosen on it) and ``test``
(nothing was). ``... learning_search add RUN_DIR SEED WALL_S CPU_S LOAD0,LOAD1`` stores a run made by
hand; ``... learning_search render`` rewrites the table from the stored runs.
``python -m tests.benchmarks.bench_learning_search probe SEED KEY=VALUE ...`` runs one with
settings changed (stored with its overrides, shown in the table, counted in no verdict; it prints
the validation file's figures only), and ``... curve SEED STEPS EVERY`` trains one longer and
evaluates the warm start and every ``EVERY``-th checkpoint on both files
(``docs/learning_search_curve.json``).

Stored in ``docs/learning_search_runs.json``: each run's metrics records, its held-out report,
and the tool-use counts measured from its traces (what RL changed): reads per rollout, the share
of rollouts that read the right document, the share whose first read was the first search result
(the habit near-duplicates punish), for the held-out models and for the traced training samples
of the first and last steps. The table is part of BENCHMARKS.md's ``learning`` section
(``bench_learning.render`` includes :func:`search_table`).

Targets (issue 40), every run of every seed, on the test file: held-out pass trained - warm >=
+0.20 with the paired 95% CI above 0, trained pass >= 0.5; the whole run under 20 minutes on 2
cores.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.benchmarks._report import (
    ROOT,
    code_of,
    code_stamp,
    cpu_short,
    head_fingerprints,
    run_fingerprint,
)

SEEDS = (0, 1, 2)
RUNS_PER_SEED = 2
"""Runs kept per seed at HEAD: the same seed samples differently from run to run (threads,
batching), so a second run shows how much a result moves under one seed."""
TEMPLATE = "search"
NAME = "kb"
RUNS = ROOT / "docs" / "learning_search_runs.json"
TARGET_OVER_WARM = 0.20
TARGET_PASS = 0.50
TARGET_WALL_S = 20 * 60
TEST_SET = "test"
"""The held-out file the targets are judged on: the one no setting was chosen on (runs of older
files, with one held-out file, are judged on it)."""
VALIDATION_SET = "validation"


# --- reading counts from conversations ----------------------------------------------------------


def _calls(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for m in messages:
        for call in m.get("tool_calls") or []:
            function = call.get("function") or {}
            try:
                args = json.loads(function.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = {}
            out.append((str(function.get("name")), args if isinstance(args, dict) else {}))
    return out


_RESULT_ID = re.compile(r"\bD\d+\b")
"""A document id in a search result: "Lisbon office (id D104): ..." (also the older
"D104: Lisbon office (...)", which stored runs hold)."""


def _tool_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The text of each tool reply, in order (non-string content as its JSON)."""
    return [
        c if isinstance(c := m.get("content"), str) else json.dumps(c)
        for m in messages
        if m.get("role") == "tool"
    ]


def _first_result(messages: list[dict[str, Any]]) -> str | None:
    """The id of the first result of the conversation's first search (None: no results)."""
    texts = _tool_texts(messages)
    found = _RESULT_ID.search(texts[0]) if texts else None
    return found[0] if found else None


def _listed(messages: list[dict[str, Any]]) -> set[str]:
    """Every id a search result showed in the conversation."""
    return {i for text in _tool_texts(messages) for i in _RESULT_ID.findall(text)}


def reading(samples: list[tuple[list[dict[str, Any]], str]]) -> dict[str, float]:
    """Reads per rollout, right-document rate (read the row's ``doc_id``), the share of
    rollouts whose first read was the first search result, and the share that read an id no
    search result showed (recalled from training, or made up), over (messages, doc_id) pairs."""
    n = len(samples)
    if not n:
        return {}
    reads = right = first = unlisted = 0
    for messages, doc_id in samples:
        ids = [
            str(a.get("doc_id", "")).strip().upper()
            for name, a in _calls(messages)
            if name == "read"
        ]
        reads += len(ids)
        right += doc_id.upper() in ids
        top = _first_result(messages)
        first += bool(ids) and top is not None and ids[0] == top
        unlisted += bool(set(ids) - _listed(messages))
    return {
        "rollouts": float(n),
        "reads_per_rollout": reads / n,
        "right_doc_rate": right / n,
        "first_result_rate": first / n,
        "unlisted_read_rate": unlisted / n,
    }


def heldout_reading(out_dir: Path) -> dict[str, dict[str, float]]:
    """Per held-out model (base / warm / trained) of one held-out file's eval folder
    (``heldout/`` or ``heldout/<name>/``): reading counts from its eval traces."""
    out = {}
    for role, folder in (
        ("base", out_dir / "baseline"),
        ("warm", out_dir / "warm"),
        ("trained", out_dir),
    ):
        pairs = []
        for path in sorted((folder / "traces").glob("*.json")):
            trace = json.loads(path.read_text())
            doc_id = str((trace.get("metadata") or {}).get("doc_id") or "")
            if trace.get("messages") is not None and doc_id:
                pairs.append((trace["messages"], doc_id))
        out[role] = reading(pairs)
    return out


def set_reading(run_dir: Path, report: dict[str, Any] | None) -> dict[str, Any]:
    """:func:`heldout_reading` of each held-out file of the run, by the file's name."""
    from osmosis_ai.eval import HeldOutSet
    from tests.benchmarks.bench_learning import heldout_sets

    # Each file's eval folder as the trainer lays it out (heldout/ or heldout/<name>/).
    return {
        name: heldout_reading(HeldOutSet(r.get("name"), None).output(run_dir))
        for name, r in heldout_sets(report)
    }


def training_reading(run_dir: Path, rows: Path) -> dict[str, dict[str, float]]:
    """Reading counts of the traced training samples of the first and the last two steps
    (each row's ``doc_id`` found by its question in the RL dataset ``rows``)."""
    by_question = {}
    for line in rows.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            by_question[row["user_prompt"]] = row["doc_id"]
    steps: dict[int, list[tuple[list[dict[str, Any]], str]]] = {}
    for path in sorted((run_dir / "traces").glob("step_*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            messages = record.get("messages") or []
            question = next((m.get("content") for m in messages if m.get("role") == "user"), None)
            if isinstance(question, str) and question in by_question:
                steps.setdefault(int(record["step"]), []).append((messages, by_question[question]))
    if not steps:
        return {}
    order = sorted(steps)
    return {
        "first_step": reading(steps[order[0]]),
        "last_2_steps": reading([p for s in order[-2:] for p in steps[s]]),
    }


# --- running and storing ---------------------------------------------------------------------------


@dataclass
class Measured:
    seed: int
    run: str
    wall_s: float
    cpu_s: float
    load: tuple[float, float]
    peak_rss_gb: float | None = None


def template_fingerprint() -> str:
    """This machine's stamp for a run: a hash of the template's files, the trainer's and eval
    package's source, and the precision ``[training] dtype = "auto"`` trains in here."""
    from osmosis_trainer.models import training_dtype

    return run_fingerprint(TEMPLATE, training_dtype("auto", "cpu"))


def is_current(stamp: str | None) -> bool:
    """Whether a stored run ran today's template and trainer (in either precision; a run of
    other code is shown as stale)."""
    return stamp == template_fingerprint() or stamp in head_fingerprints(TEMPLATE)


SET_BY_THE_BENCHMARK = {"training.seed"}


def overrides(run_dir: Path) -> dict[str, Any]:
    """Settings of the run's config that differ from the shipped template's (besides the seed,
    which the benchmark sets)."""
    import tomllib

    def flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, dict):
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[f"{prefix}{key}"] = value
        return out

    shipped_text = (ROOT / "templates" / TEMPLATE / "training.toml").read_text()
    shipped = flat(tomllib.loads(shipped_text.replace("{{name}}", NAME)))
    ran = flat(tomllib.loads((run_dir / "config.toml").read_text()))
    keys = (set(shipped) | set(ran)) - SET_BY_THE_BENCHMARK
    return {k: ran.get(k) for k in sorted(keys) if ran.get(k) != shipped.get(k)}


def entry(m: Measured, workspace: Path) -> dict[str, Any]:
    """What is stored of one run: its records and report, measured from its folder."""
    run_dir = Path(m.run)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    status_file = json.loads((run_dir / "status.json").read_text())
    status = status_file.get("status", "unknown")
    path = run_dir / "heldout.json"
    heldout = json.loads(path.read_text()) if path.is_file() else None
    return {
        "seed": m.seed,
        "run": m.run,
        "status": status,
        "wall_s": m.wall_s,
        "cpu_s": m.cpu_s,
        "load": list(m.load),
        "peak_rss_gb": m.peak_rss_gb,
        "cpu": cpu_short(),
        "dtype": status_file.get("dtype"),  # what the worker trained in
        "template": template_fingerprint(),
        "code": code_stamp(TEMPLATE),
        "workspace": str(workspace),
        # The worker spins its OpenMP threads unless the user sets a policy; on a machine
        # shared far beyond its cores, PASSIVE wastes less of the run's share.
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "overrides": overrides(run_dir),
        "records": [r for r in records if r.get("kind", "train") == "train"],
        "warm_records": [r for r in records if r.get("kind") == "warm_start"],
        "heldout": heldout,
        "set_reading": set_reading(run_dir, heldout),
        "training_reading": training_reading(run_dir, workspace / "data" / f"{NAME}.jsonl"),
    }


def _store(new: dict[str, Any]) -> None:
    """Add ``new``; runs of its seed made on other code are dropped (runs of the same code in
    the other precision stay)."""
    stored = json.loads(RUNS.read_text()) if RUNS.exists() else []
    stored = [
        s
        for s in stored
        if s["seed"] != new["seed"]
        or s.get("template") == new["template"]
        or is_current(s.get("template"))
    ]
    RUNS.parent.mkdir(parents=True, exist_ok=True)
    RUNS.write_text(json.dumps([*stored, new], indent=1) + "\n")


def run_template(seed: int, sets: dict[str, str] | None = None) -> tuple[Measured, Path]:
    """One run of the template as a user runs it (``sets``: config keys changed from the
    shipped values, ``section.key = value``), measured; and its workspace."""
    from tests.benchmarks.bench_learning import (
        _children_cpu_s,
        _children_peak_rss_gb,
        _osmosis,
        set_toml,
    )

    ws = Path(tempfile.mkdtemp(prefix=f"search-{seed}-"))
    _osmosis(["template", "create", NAME, "--template", TEMPLATE], ws)
    config = ws / "configs" / "training" / f"{NAME}.toml"
    set_toml(config, "training.seed", str(seed))
    for key, value in (sets or {}).items():
        set_toml(config, key, value)
    cpu0, load0, started = _children_cpu_s(), os.getloadavg()[0], time.perf_counter()
    done = _osmosis(["train", "submit", f"configs/training/{NAME}.toml", "--json"], ws)
    wall, cpu = time.perf_counter() - started, _children_cpu_s() - cpu0
    run = json.loads(done.stdout)["run"]
    load = (load0, os.getloadavg()[0])
    return Measured(seed, run, wall, cpu, load, _children_peak_rss_gb()), ws


def train(seed: int, sets: dict[str, str] | None = None) -> dict[str, Any]:
    """One run, stored (with ``sets`` it is a probe: stored with its overrides, shown in the
    table, counted in no verdict)."""
    stored = entry(*run_template(seed, sets))
    _store(stored)
    return stored


def probe(argv: list[str]) -> None:
    """``probe SEED KEY=VALUE ...``: one run with settings changed, stored with its overrides;
    prints the validation file's pass rates and the wall time only (choose on validation, so
    the test file stays a measure nothing was tuned on)."""
    sets = dict(arg.split("=", 1) for arg in argv[1:])
    stored = train(int(argv[0]), sets)
    validation, _ = held(stored, VALIDATION_SET)
    rewards = [float(r["reward_mean"]) for r in stored["records"]]
    print(
        f"{sets}: validation pass base / warm / trained {_passes(validation)}; training reward "
        f"last 3 steps {_f(sum(rewards[-3:]) / max(1, len(rewards[-3:])), '.3f')}; "
        f"{stored['wall_s'] / 60:.1f} min"
    )
    render()


CURVE = ROOT / "docs" / "learning_search_curve.json"
CURVE_PLOT = ROOT / "docs" / "learning_search_curve.png"


def curve(argv: list[str]) -> None:
    """``curve SEED STEPS EVERY``: one run trained for ``STEPS`` RL steps with a checkpoint every
    ``EVERY``; the warm start and each checkpoint evaluated on both held-out files, one sample
    per row. Stored in ``docs/learning_search_curve.json``: how far more steps take the agent,
    and what they cost in minutes."""
    from tests.benchmarks.bench_learning import _heldout_files, checkpoint_points

    seed, steps, every = (int(x) for x in argv[:3])
    m, ws = run_template(
        seed, {"training.max_steps": str(steps), "checkpoints.checkpoint_save_freq": str(every)}
    )
    stored = entry(m, ws)
    files = _heldout_files(ws, NAME)
    points = checkpoint_points(
        ws,
        f"configs/eval/{NAME}.toml",
        (stored["run"], stored["records"], stored["warm_records"]),
        files,
        (steps, every),
    )
    curves = json.loads(CURVE.read_text()) if CURVE.exists() else []
    keep = (
        "seed",
        "template",
        "code",
        "wall_s",
        "load",
        "cpu",
        "dtype",
        "run",
        "heldout",
        "records",
    )
    curves.append({"steps": steps, "every": every, "points": points} | {k: stored[k] for k in keep})
    CURVE.write_text(json.dumps(curves, indent=1) + "\n")
    render()


def curve_part() -> str:
    """The stored curves of the search template, as the quick start's curves are shown."""
    from tests.benchmarks.bench_learning import curves_markdown, shipped_steps

    stored = json.loads(CURVE.read_text()) if CURVE.exists() else []
    shipped = shipped_steps(TEMPLATE, NAME)
    curves = curves_markdown(stored, is_current, shipped, lambda c: c.get("dtype"), CURVE_PLOT)
    if not curves:
        return ""
    return (
        "\nHow far more RL steps take it (`python -m tests.benchmarks.bench_learning_search "
        "curve SEED STEPS EVERY`: one run trained longer, the warm start and each checkpoint "
        "evaluated on both held-out files, one sample per row; minutes since the warm start "
        "began, the evals not counted; stored in `docs/learning_search_curve.json`):\n\n" + curves
    )


def add_run(
    run_dir: str, seed: str, wall_s: str, cpu_s: str, load: str, code: str | None = None
) -> None:
    """Store a run made by hand (``osmosis train submit ... --json`` under ``time``, in a
    scratch workspace made by ``osmosis template create kb --template search``).

    ``code``: the commit the run started from, when the files have changed since (the run is
    then stamped with it, not with today's fingerprint, and shows as stale)."""
    low, high = (float(x) for x in load.split(","))
    path = Path(run_dir).resolve()
    measured = Measured(int(seed), str(path), float(wall_s), float(cpu_s), (low, high))
    stored = entry(measured, path.parent.parent)
    if code:
        stored["template"] = f"ran at {code}"
    _store(stored)


# --- rendering ---------------------------------------------------------------------------------


def numbered(runs: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """``runs`` by seed, in the order they were stored, each with its number within its seed."""
    seen: dict[int, int] = {}
    out = []
    for run in sorted(runs, key=lambda r: r["seed"]):  # stable: storing order within a seed
        seen[run["seed"]] = seen.get(run["seed"], 0) + 1
        out.append((seen[run["seed"]], run))
    return out


def _pass(report: dict[str, Any] | None, role: str) -> float | None:
    for m in (report or {}).get("models", []):
        if m.get("role") == role:
            value = m.get("pass_rate")
            return float(value) if isinstance(value, int | float) else None
    return None


def _f(value: Any, fmt: str = ".2f") -> str:
    return format(value, fmt) if isinstance(value, int | float) and math.isfinite(value) else "–"


def held(run: dict[str, Any], name: str = TEST_SET) -> tuple[dict[str, Any], dict[str, Any]]:
    """The report and reading counts of the run's held-out file ``name`` (of a run with one file,
    that file stands for the test file)."""
    from tests.benchmarks.bench_learning import heldout_sets

    sets = dict(heldout_sets(run.get("heldout")))
    if name == TEST_SET and name not in sets and len(sets) == 1:
        name = next(iter(sets))
    readings = run.get("set_reading") or {name: run.get("heldout_reading") or {}}
    return sets.get(name) or {}, readings.get(name) or {}


def targets(run: dict[str, Any]) -> dict[str, bool]:
    report, _ = held(run)
    diff = report.get("pass_vs_warm") or {}
    trained = _pass(report, "trained")
    return {
        "over_warm": (diff.get("diff") or -1) >= TARGET_OVER_WARM
        and (diff.get("ci_low") or -1) > 0,
        "pass": trained is not None and trained >= TARGET_PASS,
        "wall": run["wall_s"] < TARGET_WALL_S,
    }


def _passes(report: dict[str, Any]) -> str:
    """base / warm / trained pass rates of one held-out file's report ("–" where missing)."""
    return " / ".join(_f(_pass(report, role)) for role in ("base", "warm", "trained"))


def _reading_cell(r: dict[str, float] | None) -> str:
    if not r:
        return "–"
    return (
        f"{_f(r.get('reads_per_rollout'))} / {_f(r.get('right_doc_rate'), '.0%')} / "
        f"{_f(r.get('first_result_rate'), '.0%')} / {_f(r.get('unlisted_read_rate'), '.0%')}"
    )


PLOT = ROOT / "docs" / "learning_search.png"


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    """Per run at HEAD (seed/run), on the test file: held-out pass (base, warm start, trained),
    and how the agent read (right document, first result) warm start → trained."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6), dpi=110)
    width = 0.25
    for i, role in enumerate(("base", "warm", "trained")):
        values = [_pass(held(r)[0], role) or 0.0 for r in runs]
        left.bar([k + (i - 1) * width for k in range(len(runs))], values, width, label=role)
    left.axhline(TARGET_PASS, color="grey", lw=1, ls="--")
    left.set_ylabel("test file pass rate")
    left.set_ylim(0, 1)
    for ax in (left, right):
        ax.set_xticks(range(len(runs)), [f"seed {r['seed']}/{n}" for n, r in numbered(runs)])
        ax.grid(alpha=0.3, axis="y")
    left.legend(fontsize=8)
    for i, (key, label) in enumerate(
        (("right_doc_rate", "right document read"), ("first_result_rate", "first result read"))
    ):
        for j, role in enumerate(("warm", "trained")):
            values = [(held(r)[1].get(role) or {}).get(key, 0.0) for r in runs]
            right.bar(
                [k + (2 * i + j - 1.5) * 0.2 for k in range(len(runs))],
                values,
                0.2,
                label=f"{label}, {role}",
                hatch="" if role == "warm" else "//",
                color=f"C{i}",
                alpha=0.55 if role == "warm" else 1.0,
            )
    right.set_ylabel("share of test file rollouts")
    right.set_ylim(0, 1.05)
    right.legend(fontsize=7)
    fig.suptitle(
        "search template at HEAD: OpenAI Agents SDK agent over SQLite/FTS5, SmolLM2-135M, "
        "warm start then GRPO + LoRA, CPU",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def search_table() -> str:
    """The ``search`` part of the learning section, from the stored runs (no training)."""
    stored = json.loads(RUNS.read_text()) if RUNS.exists() else []
    if not stored:
        return ""
    rows, met = [], []
    shown: list[dict[str, Any]] = []
    for n, run in numbered(stored):
        report, reading_ = held(run)
        diff = report.get("pass_vs_warm") or {}
        records = run.get("records") or []
        rewards = [float(r["reward_mean"]) for r in records]
        validation, _ = held(run, VALIDATION_SET)
        train_r = run.get("training_reading") or {}
        load = run.get("load") or [math.nan, math.nan]
        current = is_current(run.get("template")) and run.get("status") == "finished"
        stale = "" if is_current(run.get("template")) else f" (stale: {run.get('template')})"
        if run.get("overrides"):
            stale += " (set: " + ", ".join(f"{k} = {v}" for k, v in run["overrides"].items()) + ")"
        rows.append(
            f"| {run['seed']} | {n} | {run['status']}{stale} | "
            f"{len(run.get('warm_records') or [])} | "
            f"{len(records)} | {_f(sum(rewards[:3]) / max(1, len(rewards[:3])), '.3f')} → "
            f"{_f(sum(rewards[-3:]) / max(1, len(rewards[-3:])), '.3f')} | "
            f"{_reading_cell(train_r.get('first_step'))} → "
            f"{_reading_cell(train_r.get('last_2_steps'))} | "
            f"{_passes(validation)} | {_passes(report)} | "
            f"{_f(diff.get('diff'), '+.3f')} [{_f(diff.get('ci_low'), '+.3f')}, "
            f"{_f(diff.get('ci_high'), '+.3f')}] | "
            f"{_reading_cell(reading_.get('warm'))} → {_reading_cell(reading_.get('trained'))} | "
            f"{run['wall_s'] / 60:.1f} min | {_f(run.get('peak_rss_gb'), '.1f')} GB | "
            f"{_f(load[0], '.1f')} → {_f(load[1], '.1f')}"
            f"{' (OMP ' + run['omp_wait_policy'] + ')' if run.get('omp_wait_policy') else ''} | "
            f"{_machine(run)} |"
        )
        if current and not run.get("overrides"):
            met.append(targets(run))
            shown.append(run)

    complete = all(sum(r["seed"] == seed for r in shown) >= RUNS_PER_SEED for seed in SEEDS)

    def verdict(key: str) -> str:
        # Only finished runs of the shipped files count (the stale ones stay in the table).
        hits = sum(m[key] for m in met)
        if not complete:
            return (
                f"{hits} of {len(met)} runs at HEAD (the target: {len(SEEDS)} seeds × "
                f"{RUNS_PER_SEED} runs)"
            )
        return "met" if hits == len(met) else f"NOT met ({hits} of {len(met)} runs)"

    return (
        "\n### The `search` template (OpenAI Agents SDK, SQLite/FTS5 knowledge base)\n\n"
        "`osmosis template create kb --template search` then `osmosis train submit "
        f"configs/training/kb.toml`, {RUNS_PER_SEED} runs per seed (`python -m tests.benchmarks "
        "learning_search`, stored in `docs/learning_search_runs.json`): a warm start on 64 "
        "search → read → answer demonstrations (right document first in half), RL on 64 "
        "questions about other document families whose document is the first search result "
        f"in {_train_first()} (the others split between the second and the third), and the "
        "run's `[heldout]` eval on two files of 32 questions about families neither reads "
        "(right document first in half): `validation`, on which that share and the number of "
        "RL steps were chosen, and "
        "`test`, on which nothing was. "
        f"Targets, every run, on the test file: trained − warm pass ≥ +{TARGET_OVER_WARM:.2f} "
        "with the "
        f"paired 95% CI above 0 — **{verdict('over_warm')}**; trained pass ≥ "
        f"{TARGET_PASS:.0%} — **{verdict('pass')}**; the whole run under "
        f"{TARGET_WALL_S // 60} min — **{verdict('wall')}** (load: the 1-minute load average "
        "at the start and end; above 2 the 2 cores were shared and the wall is an upper "
        "bound). Reading: reads per rollout / rollouts that read the right document / "
        "rollouts whose first read was the first search result / rollouts that read an id no "
        "search result showed (recalled or made up), from the traces (training: "
        "the traced samples of the first step → the last two; test file: warm → trained).\n\n"
        "| seed | run | status | warm-start steps | RL steps | reward first 3 → last 3 "
        "| training: reading | validation pass base / warm / trained "
        "| test pass base / warm / trained "
        "| test: trained − warm pass [95% CI] | test: reading, warm → trained "
        "| wall | worker peak memory | load | CPU, precision |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
        + (_plotted(shown) if shown else "")
        + curve_part()
    )


def _train_first() -> str:
    """The template's share of RL rows whose right document is the first search result, as its
    ``make_data.py`` sets it (``TRAIN_FIRST = 1 / 3``)."""
    text = (ROOT / "templates" / "search" / "make_data.py").read_text(encoding="utf-8")
    found = re.search(r"^TRAIN_FIRST = (\d+) / (\d+)$", text, re.M)
    return f"{found[1]} of {found[2]}" if found else "a share set in the template's make_data.py"


def _machine(run: dict[str, Any]) -> str:
    """The CPU and precision cell of a stored run."""
    return f"{run.get('cpu') or 'not recorded'}{', ' + run['dtype'] if run.get('dtype') else ''}"


def _plotted(runs: list[dict[str, Any]]) -> str:
    plot(runs, PLOT)
    return (
        "\n![held-out pass and reading per run, warm start → trained](docs/learning_search.png)\n"
    )


def readme_block() -> str:
    """What README.md quotes of the search template (its ``bench:learning-search-readme``
    block): each finished run of the shipped files; with none stored yet, the runs of the last
    fingerprint, marked stale."""
    from tests.benchmarks.bench_learning import by_precision, last_fingerprint, stale_note

    stored = json.loads(RUNS.read_text()) if RUNS.exists() else []
    shipped = [r for r in stored if not r.get("overrides")]

    def finished_at(stamp: str | None) -> list[dict[str, Any]]:
        return [
            r
            for r in shipped
            if (is_current(r.get("template")) if stamp is None else code_of(r) == stamp)
            and r.get("status") == "finished"
        ]

    head = code_stamp(TEMPLATE)
    runs, note = finished_at(None), ""
    if not runs and (last := last_fingerprint(shipped)):
        runs = finished_at(last)
        note = stale_note(last, head, "python -m tests.benchmarks learning_search")
    if not runs:
        return (
            "No run of the shipped search template is stored yet (`python -m tests.benchmarks "
            f"learning_search` measures {RUNS_PER_SEED} per seed).\n"
        )
    lines = []
    for n, run in numbered(runs):
        report, reading_ = held(run)
        diff = report.get("pass_vs_warm") or {}
        validation, _ = held(run, VALIDATION_SET)
        load = run.get("load") or [0.0, 0.0]
        lines.append(
            f"| {run['seed']} | {n} | {_passes(validation)} | {_passes(report)} | "
            f"{_f(diff.get('diff'), '+.2f')} "
            f"[{_f(diff.get('ci_low'), '+.2f')}, {_f(diff.get('ci_high'), '+.2f')}] | "
            f"{_reading_cell(reading_.get('warm'))} → {_reading_cell(reading_.get('trained'))} | "
            f"{run['wall_s'] / 60:.1f} min ({'loaded' if max(load) >= 2 else 'quiet'}) | "
            f"{_f(run.get('peak_rss_gb'), '.1f')} GB | {_machine(run)} |"
        )
    met = [targets(r) for r in runs]
    return (
        note
        + "| seed | run | validation pass base / warm / trained | test pass base / warm / trained "
        "| test: trained − warm [95% CI] "
        "| test: reads per rollout / right document / first result read / id not shown, "
        "warm → trained "
        "| wall | worker peak memory | CPU, precision |\n|---|---|---|---|---|---|---|---|---|\n"
        + "\n".join(lines)
        + f"\n\nTargets over {len(runs)} run{'s' * (len(runs) != 1)} "
        f"({len({r['seed'] for r in runs})} of "
        f"{len(SEEDS)} seeds; the target: {RUNS_PER_SEED} runs each), on the test file: "
        "trained − warm ≥ "
        f"+{TARGET_OVER_WARM:.2f} with the CI above 0 in {sum(m['over_warm'] for m in met)}; "
        f"trained pass ≥ {TARGET_PASS:.2f} in {sum(m['pass'] for m in met)}; under "
        f"{TARGET_WALL_S // 60} min in {sum(m['wall'] for m in met)}."
        + by_precision(
            [r.get("dtype") for r in runs],
            met,
            {
                "over_warm": f"+{TARGET_OVER_WARM:.2f} with the CI above 0",
                "pass": f"pass ≥ {TARGET_PASS:.2f}",
                "wall": f"under {TARGET_WALL_S // 60} min",
            },
        )
        + "\n"
    )


def render() -> None:
    """Rewrite BENCHMARKS.md's learning section (it includes this table)."""
    from tests.benchmarks.bench_learning import render as render_learning

    render_learning()


def main() -> None:
    """Fill every seed to ``RUNS_PER_SEED`` runs at HEAD, one run per seed a round (a fill cut
    short still covers every seed), then render."""
    stored = json.loads(RUNS.read_text()) if RUNS.exists() else []
    done = {s: sum(r["seed"] == s and is_current(r.get("template")) for r in stored) for s in SEEDS}
    for round_ in range(RUNS_PER_SEED):
        for seed in SEEDS:
            if done[seed] <= round_:
                train(seed)
    render()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "render":
        render()
    elif len(sys.argv) > 2 and sys.argv[1] == "probe":
        probe(sys.argv[2:])
    elif len(sys.argv) > 4 and sys.argv[1] == "curve":
        curve(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "add":
        add_run(*sys.argv[2:8])
        render()
    else:
        main()
