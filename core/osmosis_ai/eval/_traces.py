"""Turning runner outcomes into result records and trace files."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from osmosis_ai.eval._records import EvalRecord, RecordStatus
from osmosis_ai.rollout._types import RolloutSample, SampleStatus

__all__ = ["outcome_records", "write_trace"]


def _error_fields(error: Any) -> tuple[str | None, str | None]:
    if error is None:
        return None, None
    category = getattr(error, "category", None)
    message = getattr(error, "message", None)
    if category is None and message is None:
        return type(error).__name__, str(error)
    return (str(category.value if hasattr(category, "value") else category), message)


def _sample_status(sample: RolloutSample) -> RecordStatus:
    if sample.status is SampleStatus.FAILED or sample.error is not None:
        return "failed"
    if sample.remove_sample or sample.status is SampleStatus.SKIPPED:
        return "skipped"
    if sample.reward is None:
        return "failed"
    return "success"


def outcome_records(outcome: Any, *, pass_threshold: float) -> list[tuple[EvalRecord, Any]]:
    """One record per sample of a runner outcome (one failed record if it has no sample).

    Returns ``(record, sample_or_None)`` pairs so the caller can write the sample's trace.
    """
    base = {
        "row_index": int(outcome.row_index),
        "source_row_index": getattr(outcome, "source_row_index", None),
        "run_index": int(outcome.sample_index),
        "rollout_id": str(outcome.rollout_id),
        "duration_ms": float(getattr(outcome, "duration_ms", 0.0) or 0.0),
    }
    samples: list[RolloutSample] = list(getattr(outcome, "samples", None) or [])
    if not samples:
        error_type, error = _error_fields(getattr(outcome, "error", None))
        return [
            (
                EvalRecord(
                    **base,
                    status="failed",
                    error_type=error_type or "internal_error",
                    error=error or "the rollout produced no sample",
                ),
                None,
            )
        ]
    out: list[tuple[EvalRecord, Any]] = []
    for sample in samples:
        status = _sample_status(sample)
        error_type, error = _error_fields(sample.error)
        if status == "failed" and error_type is None:
            error_type, error = "grader_error", "the grader set no reward for this sample"
        reward = sample.reward if status == "success" else None
        if reward is not None and not math.isfinite(reward):  # pragma: no cover - model forbids
            reward = None
        prompt_tokens = sum(c.prompt_tokens or len(c.prompt_token_ids or []) for c in sample.calls)
        completion_tokens = sum(
            c.completion_tokens or len(c.completion_token_ids or []) for c in sample.calls
        )
        out.append(
            (
                EvalRecord(
                    **base,
                    sample_id=sample.id,
                    status=status,
                    reward=reward,
                    passed=(reward >= pass_threshold) if reward is not None else None,
                    tokens=prompt_tokens + completion_tokens,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    num_calls=len(sample.calls),
                    error_type=error_type,
                    error=error,
                ),
                sample,
            )
        )
    return out


def trace_name(record: EvalRecord) -> str:
    sample = record.sample_id or "rollout"
    return f"traces/row{record.row_index:05d}-run{record.run_index:03d}-{sample}.json"


def write_trace(run_dir: Path, record: EvalRecord, sample: Any, outcome: Any) -> str:
    """Write one sample's trace (prompt, messages, policy calls, reward, error); return its path."""
    rel = trace_name(record)
    payload: dict[str, Any] = {
        "row_index": record.row_index,
        "run_index": record.run_index,
        "rollout_id": record.rollout_id,
        "sample_id": record.sample_id,
        "status": record.status,
        "reward": record.reward,
        "error_type": record.error_type,
        "error": record.error,
        "label": getattr(outcome, "label", None),
        "metadata": getattr(outcome, "metadata", None) or {},
        "messages": sample.messages if sample is not None else [],
        "calls": [c.model_dump(mode="json") for c in sample.calls] if sample is not None else [],
        "metrics": dict(sample.metrics) if sample is not None else {},
    }
    path = run_dir / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
    return rel
