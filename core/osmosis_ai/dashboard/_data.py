"""What the dashboard shows, read from the run store and the eval runs (torch-free, read-only).

User input (a run id, an eval run name, a step) never becomes a path by itself: names are
checked against a strict pattern and then looked up among the folders the store lists, and a
step is an integer formatted into a fixed file name. So nothing outside the workspace's
``runs/`` and ``.osmosis/evals/`` can be read through the dashboard.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

from osmosis_ai.runs import RunRecord, describe_run, list_runs

__all__ = [
    "BadNameError",
    "NotFoundError",
    "eval_compare",
    "eval_detail",
    "eval_list",
    "find_record",
    "run_detail",
    "run_failures",
    "run_list",
    "run_metrics",
    "trace_step",
    "trace_steps",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")
TRACES_DIR = "traces"
"""``<run>/traces/step_NNNNNN.jsonl``: the trainer's bounded sample of each step's trajectories."""


class BadNameError(ValueError):
    """A run or eval name that cannot name a folder of the store (separators, ``..``, ...)."""


class NotFoundError(LookupError):
    """No run / eval run / trace of that name (deleted, or never there)."""


def _check_name(name: str, what: str) -> str:
    if not _NAME.fullmatch(name) or ".." in name:
        raise BadNameError(
            f"{what} name {name!r} is not valid: use the name shown in the list "
            "(letters, digits, '_', '.', '-'; no path separators)"
        )
    return name


def _finite(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The records of a JSONL file and the 1-based numbers of lines that were not JSON objects
    (a torn or corrupt line is reported, never fatal)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return [], []
    records: list[dict[str, Any]] = []
    bad: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            bad.append(number)
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            bad.append(number)
    return records, bad


# -- training runs ----------------------------------------------------------------------------


def run_list(runs_root: Path) -> list[dict[str, Any]]:
    """Every run's list row, newest first."""
    rows = []
    for record in reversed(list_runs(runs_root)):
        row = record.summary()
        row["activity"] = record.activity
        rows.append(row)
    return rows


def find_record(runs_root: Path, run_id: str) -> RunRecord:
    _check_name(run_id, "run")
    for record in list_runs(runs_root):
        if record.run_id == run_id:
            return record
    raise NotFoundError(f"no run {run_id!r} under {runs_root} (deleted?); back to the run list")


def run_detail(runs_root: Path, run_id: str) -> dict[str, Any]:
    """``osmosis train info``'s view of one run, plus whether it has traces."""
    record = find_record(runs_root, run_id)
    out = describe_run(record)
    out["traces"] = bool(_trace_files(record.path))
    return out


def run_metrics(runs_root: Path, run_id: str) -> dict[str, Any]:
    """The run's metric records, split into training and validation, with corrupt lines."""
    record = find_record(runs_root, run_id)
    records, bad = read_jsonl(record.path / "metrics.jsonl")
    train = [r for r in records if r.get("kind", "train") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]
    for r in train:
        # Total length (prompt + completions + tool results) per trained sequence.
        tokens, seqs = _finite(r.get("train_tokens")), _finite(r.get("train_sequences"))
        if "total_length" not in r and tokens is not None and seqs:
            r["total_length"] = tokens / seqs
    return {"run_id": run_id, "train": train, "eval": evals, "corrupt_lines": bad}


def run_failures(runs_root: Path, run_id: str) -> dict[str, Any]:
    """Failed rollouts by reason, summed over the run, and per step."""
    record = find_record(runs_root, run_id)
    records, bad = read_jsonl(record.path / "failures.jsonl")
    total: Counter[str] = Counter()
    for r in records:
        reasons = r.get("reasons")
        if isinstance(reasons, dict):
            for reason, count in reasons.items():
                if isinstance(count, int):
                    total[str(reason)] += count
    return {"by_reason": dict(total.most_common()), "steps": records, "corrupt_lines": bad}


def _trace_files(run_path: Path) -> dict[int, Path]:
    folder = run_path / TRACES_DIR
    out: dict[int, Path] = {}
    if not folder.is_dir():
        return out
    for p in folder.glob("step_*.jsonl"):
        digits = p.stem.removeprefix("step_")
        if digits.isdigit() and p.is_file() and not p.is_symlink():
            out[int(digits)] = p
    return out


def trace_steps(runs_root: Path, run_id: str) -> list[int]:
    """The steps of the run that have sampled trajectories."""
    return sorted(_trace_files(find_record(runs_root, run_id).path))


def trace_step(runs_root: Path, run_id: str, step: int) -> dict[str, Any]:
    """One step's sampled trajectories, grouped by GRPO group."""
    files = _trace_files(find_record(runs_root, run_id).path)
    if step not in files:
        raise NotFoundError(f"run {run_id!r} has no traces for step {step}")
    records, bad = read_jsonl(files[step])
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(str(r.get("group_id", "?")), []).append(r)
    return {
        "step": step,
        "groups": [{"group_id": g, "samples": s} for g, s in groups.items()],
        "corrupt_lines": bad,
    }


# -- eval runs --------------------------------------------------------------------------------


def _eval_views(evals_root: Path) -> list[Any]:
    from osmosis_ai.eval._store import list_eval_runs

    return list_eval_runs(evals_root)


def _find_eval(evals_root: Path, name: str) -> Any:
    _check_name(name, "eval run")
    for view in _eval_views(evals_root):
        if view.name == name:
            return view
    raise NotFoundError(f"no eval run {name!r} under {evals_root} (deleted?)")


def eval_list(evals_root: Path) -> list[dict[str, Any]]:
    """Every eval run's list row, newest first."""
    return [v.as_dict() for v in reversed(_eval_views(evals_root))]


def _failures_by_reason(results: list[dict[str, Any]]) -> dict[str, int]:
    counts = Counter(
        str(r.get("error_type") or "unknown") for r in results if r.get("status") == "failed"
    )
    return dict(counts.most_common())


def eval_detail(evals_root: Path, name: str) -> dict[str, Any]:
    """One eval run: its summary (pass@k included), per-row results and failures by reason."""
    out: dict[str, Any] = _find_eval(evals_root, name).as_dict(records=True)
    out["failures_by_reason"] = _failures_by_reason(out.get("results") or [])
    return out


def _per_row(results: list[dict[str, Any]]) -> dict[int, float]:
    sums: dict[int, list[float]] = {}
    for r in results:
        reward = _finite(r.get("reward"))
        if reward is not None and isinstance(r.get("row_index"), int):
            sums.setdefault(r["row_index"], []).append(reward)
    return {row: sum(v) / len(v) for row, v in sums.items()}


def eval_compare(evals_root: Path, a: str, b: str) -> dict[str, Any]:
    """Two eval runs side by side: their summaries and the mean reward of each shared row."""
    left, right = eval_detail(evals_root, a), eval_detail(evals_root, b)
    ra, rb = _per_row(left.get("results") or []), _per_row(right.get("results") or [])
    rows = [
        {"row_index": i, "a": ra[i], "b": rb[i], "diff": rb[i] - ra[i]}
        for i in sorted(set(ra) & set(rb))
    ]
    diffs = [r["diff"] for r in rows]
    return {
        "a": {k: left[k] for k in ("name", "model", "status", "summary")},
        "b": {k: right[k] for k in ("name", "model", "status", "summary")},
        "rows": rows,
        "mean_diff": sum(diffs) / len(diffs) if diffs else None,
        "b_better": sum(d > 0 for d in diffs),
        "a_better": sum(d < 0 for d in diffs),
    }
