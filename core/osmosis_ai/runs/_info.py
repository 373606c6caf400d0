"""``osmosis train info``'s content: one run as a JSON-ready dict (also for the dashboard)."""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

from osmosis_ai.config import redact_config
from osmosis_ai.errors import UnreadableFileError
from osmosis_ai.learning import summarize_learning
from osmosis_ai.runs._published import publish_status
from osmosis_ai.runs._read import RunRecord
from osmosis_ai.runs._schema import run_file_root
from osmosis_ai.safe_io import read_json_object, read_toml

__all__ = ["describe_run"]

_SUMMARY_KEYS = (
    "reward_mean", "pass_rate", "loss", "kl", "entropy", "response_length",
    "truncation_ratio", "failed_rollouts", "step_time_s",
)


def _finite(values: list[Any]) -> list[float]:
    return [
        float(v) for v in values
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    ]


HELDOUT_FILE = "heldout.json"
"""The ``[heldout]`` comparison a run wrote at its end (an eval ``Comparison`` as JSON)."""


def _heldout(record: RunRecord, problems: list[str]) -> dict[str, Any] | None:
    try:
        return read_json_object(record.path / HELDOUT_FILE, under=run_file_root(record.path))
    except UnreadableFileError as exc:
        if not exc.missing:
            problems.append(str(exc))
        return None


def _step(record: dict[str, Any]) -> int | None:
    value = record.get("step")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _per_step(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per step, the last one written (a resumed step is written again)."""
    by_step = {s: r for r in records if (s := _step(r)) is not None}
    return [by_step[s] for s in sorted(by_step)]


def _improvement(train: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The seeds' **Improvement**: mean reward of the last steps minus that of the first."""
    learning = summarize_learning(train)
    if learning is None:
        return None
    return {"first": learning.first, "last": learning.last, "change": learning.change,
            "window": learning.window, "steps": learning.steps}


def _samples(train: list[dict[str, Any]]) -> int | None:
    """The seeds' **Samples**: rollout samples generated over the run's training steps."""
    counts = _finite([r.get("samples") for r in train])
    return int(sum(counts)) if counts else None


def _warm_start(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The warm-start phase's steps and its first and last loss and token accuracy."""
    rows = _per_step([r for r in records if r.get("kind") == "warm_start"])
    if not rows:
        return None
    out: dict[str, Any] = {"steps": len(rows)}
    for key in ("loss", "token_accuracy"):
        values = _finite([r.get(f"warm_start/{key}") for r in rows])
        out[key] = {"first": values[0], "last": values[-1]} if values else None
    return out


def _config(record: RunRecord, problems: list[str]) -> dict[str, Any] | None:
    """The run's config snapshot, its secrets redacted (again: folders written before
    snapshots were redacted hold them in clear)."""
    try:
        _text, data = read_toml(record.path / "config.toml", under=run_file_root(record.path))
    except UnreadableFileError as exc:
        if not exc.missing:
            problems.append(str(exc))
        return None
    return redact_config(data)


def describe_run(record: RunRecord) -> dict[str, Any]:
    """Config, progress, latest and best reward, a metrics summary, checkpoints, the error.

    A file of the run that cannot be read (see :mod:`osmosis_ai.safe_io`) is left out and
    named in ``problems`` (``this file is unreadable: PATH: REASON``, or ``PATH:LINE: REASON``);
    the rest is still shown.
    """
    raw = record.raw
    problems: list[str] = []
    config = _config(record, problems)
    records, metric_problems = record.metrics_checked()
    problems += metric_problems
    checkpoints = record.checkpoints()
    problems += [c.unreadable for c in checkpoints if c.unreadable]
    published = [publish_status(c.path) for c in checkpoints]
    problems += [p["published_unreadable"] for p in published if "published_unreadable" in p]
    train = _per_step([r for r in records if r.get("kind", "train") == "train"])
    evals = [r for r in records if r.get("kind") == "eval"]
    summary: dict[str, dict[str, float]] = {}
    for key in _SUMMARY_KEYS:
        values = _finite([r.get(key) for r in train])
        if values:
            summary[key] = {
                "first": values[0], "last": values[-1], "min": min(values),
                "max": max(values), "mean": statistics.fmean(values),
            }
    scored = [
        (r["step"], vals[0]) for r in train if (vals := _finite([r.get("reward_mean")]))
    ]
    best = max(scored, key=lambda sv: sv[1]) if scored else None
    created, finished = raw.get("created_at"), raw.get("finished_at")
    end = finished if isinstance(finished, int | float) else time.time()
    return {
        "name": record.name,
        "run_id": record.run_id,
        "path": str(record.path),
        "status": record.status,
        "phase": record.phase,
        "activity": record.activity,
        "error": record.error if record.status in ("failed", "crashed", "killed") else None,
        "model": record.model,
        "rollout": record.rollout,
        "dataset": record.dataset,
        "device": raw.get("device"),
        "code": raw.get("code"),
        "progress": {"current_step": record.step, "total_steps": record.total_steps},
        "latest_reward": scored[-1][1] if scored else None,
        "best_reward": {"step": best[0], "reward": best[1]} if best else None,
        "validation": {k: v for k, v in evals[-1].items() if k.startswith("val_")}
        if evals else None,
        "metrics_summary": summary,
        "improvement": _improvement(train),
        "samples": _samples(train),
        "warm_start": _warm_start(records),
        "checkpoints": [
            {**c.as_dict(), **pub} for c, pub in zip(checkpoints, published, strict=True)
        ],
        "created_at": created,
        "finished_at": finished,
        "duration_s": round(end - created, 1) if isinstance(created, int | float) else None,
        "pid": raw.get("pid"),
        "cluster": raw.get("cluster"),
        "heldout": _heldout(record, problems),
        "heldout_error": raw.get("heldout_error"),
        "heartbeat_age_s": round(record.heartbeat_age_s, 1)
        if record.heartbeat_age_s is not None else None,
        "log_file": str(record.log_file),
        "metrics_file": str(record.path / "metrics.jsonl"),
        "config": config,
        "unreadable": record.unreadable,
        "problems": problems,
    }
