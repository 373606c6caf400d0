"""What the dashboard shows, read from the run store and the eval runs (torch-free, read-only).

User input (a run id, an eval run name, a step, an output's path) never becomes a path by
itself: names are checked against a strict pattern and then looked up among the folders the
store lists, a step is an integer formatted into a fixed file name, and an output's path must
name a plain file the listing of ``<run>/artifacts`` holds. No symbolic link is followed
(the store does not list a linked run or eval folder; a linked ``traces/``, ``metrics.jsonl``,
``summary.json`` or artifact is named as unreadable), so nothing outside the workspace's
``runs/`` and ``.osmosis/evals/`` can be read through the dashboard. Every file is read through
:mod:`osmosis_ai.safe_io` (regular files, size, depth and integer caps): one bad file is a
``problems`` entry of its run, never a 500.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

from osmosis_ai.dashboard._traces import sample_view
from osmosis_ai.errors import UnreadableFileError
from osmosis_ai.runs import RunRecord, describe_run, list_runs, read_trace_step, trace_files
from osmosis_ai.runs._schema import inside, run_file_root
from osmosis_ai.safe_io import STREAM_MAX_BYTES, open_regular
from osmosis_ai.safe_io import read_jsonl as read_lines

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
    "run_output",
    "run_outputs",
    "trace_step",
    "trace_steps",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")


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


def read_jsonl(path: Path, *, under: Path) -> tuple[list[dict[str, Any]], list[int], list[str]]:
    """The records of a JSONL file, the 1-based numbers of lines that were not JSON objects (a
    torn or corrupt line is reported, never fatal) and, located, every problem: the file itself
    (a link, a FIFO, too big) or its lines. No such file: nothing."""
    try:
        found = read_lines(path, under=under)
    except UnreadableFileError as exc:
        return [], [], ([] if exc.missing else [str(exc)])
    bad = sorted([n for n, _ in found.bad] + [n for n, v in found.records if not isinstance(v, dict)])
    return found.objects(), bad, found.problems


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
    out["traces"] = bool(trace_files(record.path))
    return out


def run_metrics(runs_root: Path, run_id: str) -> dict[str, Any]:
    """The run's metric records, split into training and validation, with corrupt lines."""
    record = find_record(runs_root, run_id)
    records, bad, problems = read_jsonl(
        record.path / "metrics.jsonl", under=run_file_root(record.path)
    )
    train = [r for r in records if r.get("kind", "train") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]
    warm = [r for r in records if r.get("kind") == "warm_start"]
    for r in train:
        # Total length (prompt + completions + tool results) per trained sequence.
        tokens, seqs = _finite(r.get("train_tokens")), _finite(r.get("train_sequences"))
        if "total_length" not in r and tokens is not None and seqs:
            r["total_length"] = tokens / seqs
    return {
        "run_id": run_id,
        "train": train,
        "eval": evals,
        "warm_start": warm,
        "corrupt_lines": bad,
        "problems": problems,
    }


def run_failures(runs_root: Path, run_id: str) -> dict[str, Any]:
    """Failed rollouts by reason, summed over the run, and per step."""
    record = find_record(runs_root, run_id)
    records, bad, problems = read_jsonl(
        record.path / "failures.jsonl", under=run_file_root(record.path)
    )
    total: Counter[str] = Counter()
    for r in records:
        reasons = r.get("reasons")
        if isinstance(reasons, dict):
            for reason, count in reasons.items():
                if isinstance(count, int):
                    total[str(reason)] += count
    return {
        "by_reason": dict(total.most_common()), "steps": records, "corrupt_lines": bad,
        "problems": problems,
    }


def trace_steps(runs_root: Path, run_id: str) -> list[int]:
    """The steps of the run that have sampled trajectories."""
    return list(trace_files(find_record(runs_root, run_id).path))


def trace_step(runs_root: Path, run_id: str, step: int) -> dict[str, Any]:
    """One step's sampled trajectories, grouped by GRPO group."""
    record = find_record(runs_root, run_id)
    if step not in trace_files(record.path):
        raise NotFoundError(f"run {run_id!r} has no traces for step {step}")
    try:
        found = read_trace_step(record.path, step)
    except UnreadableFileError as exc:
        return {"step": step, "groups": [], "corrupt_lines": [], "problems": [str(exc)]}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in found.objects():
        groups.setdefault(str(r.get("group_id", "?")), []).append(sample_view(r))
    bad = sorted([n for n, _ in found.bad] + [n for n, v in found.records if not isinstance(v, dict)])
    return {
        "step": step,
        "groups": [{"group_id": g, "samples": s} for g, s in groups.items()],
        "corrupt_lines": bad,
        "problems": found.problems,
    }


# -- outputs (ctx.artifacts_dir) ----------------------------------------------------------------

ARTIFACTS_DIR = "artifacts"
"""``<run>/artifacts/<rollout_id>/artifacts/``: each rollout's ``ctx.artifacts_dir``."""
MAX_OUTPUTS = 2000
"""Files listed per run (the newest first); the count of the rest is reported."""
MAX_OUTPUT_BYTES = 256 * 1024
"""The most of one output shown as text."""


def _output_files(run_path: Path) -> list[tuple[str, Path]]:
    """``(path relative to artifacts/, file)`` of every plain file under ``<run>/artifacts``;
    links (to files or folders) are not followed and not listed."""
    root = inside(run_path, ARTIFACTS_DIR)
    if root is None or not root.is_dir():
        return []
    out = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not (here / d).is_symlink())
        for name in sorted(files):
            path = here / name
            if not path.is_symlink() and path.is_file():
                out.append((path.relative_to(root).as_posix(), path))
    return out


def run_outputs(runs_root: Path, run_id: str) -> dict[str, Any]:
    """The files the run's rollouts wrote to their ``ctx.artifacts_dir`` (newest first)."""
    record = find_record(runs_root, run_id)
    files: list[dict[str, Any]] = []
    for rel, path in _output_files(record.path):
        try:
            st = path.stat()
        except OSError:
            continue
        files.append({"path": rel, "size": st.st_size, "modified": st.st_mtime})
    files.sort(key=lambda f: (-f["modified"], f["path"]))
    return {
        "run_id": run_id,
        "folder": str(record.path / ARTIFACTS_DIR),
        "files": files[:MAX_OUTPUTS],
        "more": max(0, len(files) - MAX_OUTPUTS),
    }


def run_output(runs_root: Path, run_id: str, rel: str) -> dict[str, Any]:
    """One output file as text (its first :data:`MAX_OUTPUT_BYTES`), or ``binary``: only a
    path the listing holds is opened, so ``..``, absolute paths and links never are."""
    record = find_record(runs_root, run_id)
    found = dict(_output_files(record.path)).get(rel)
    if found is None:
        raise NotFoundError(f"run {run_id!r} has no output {rel!r} (see its Outputs list)")
    try:
        # A file swapped for a link or a FIFO after the listing is refused, not followed or
        # waited on; only its first MAX_OUTPUT_BYTES are read, whatever its size.
        fd, size = open_regular(found, under=record.path, max_bytes=STREAM_MAX_BYTES)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(MAX_OUTPUT_BYTES + 1)
    except (OSError, UnreadableFileError) as exc:
        raise NotFoundError(f"output {rel!r} of run {run_id!r} cannot be read: {exc}") from exc
    cut = len(data) > MAX_OUTPUT_BYTES
    data = data[:MAX_OUTPUT_BYTES]
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None if b"\0" in data else data.decode("utf-8", "replace")
    return {"path": rel, "size": size, "text": text, "binary": text is None, "cut": cut}


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
