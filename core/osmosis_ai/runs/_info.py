"""``osmosis train info``'s content: one run as a JSON-ready dict (also for the dashboard)."""

from __future__ import annotations

import json
import math
import statistics
import time
import tomllib
from typing import Any

from osmosis_ai.config import redact_config
from osmosis_ai.runs._read import RunRecord

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


def _heldout(record: RunRecord) -> dict[str, Any] | None:
    try:
        data = json.loads((record.path / HELDOUT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def describe_run(record: RunRecord) -> dict[str, Any]:
    """Config, progress, latest and best reward, a metrics summary, checkpoints, the error."""
    raw = record.raw
    try:
        # Redacted again here: run folders written before snapshots were redacted.
        config: dict[str, Any] | None = redact_config(
            tomllib.loads(record.run_dir.config_file.read_text())
        )
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        config = None
    records = record.metrics()
    train = [r for r in records if r.get("kind", "train") == "train"]
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
        (int(r["step"]), vals[0])
        for r in train
        if "step" in r and (vals := _finite([r.get("reward_mean")]))
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
        "checkpoints": [c.as_dict() for c in record.checkpoints()],
        "created_at": created,
        "finished_at": finished,
        "duration_s": round(end - created, 1) if isinstance(created, int | float) else None,
        "pid": raw.get("pid"),
        "cluster": raw.get("cluster"),
        "heldout": _heldout(record),
        "heldout_error": raw.get("heldout_error"),
        "heartbeat_age_s": round(record.heartbeat_age_s, 1)
        if record.heartbeat_age_s is not None else None,
        "log_file": str(record.log_file),
        "metrics_file": str(record.path / "metrics.jsonl"),
        "config": config,
    }
