"""Turning runner outcomes into result records and trace files."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from osmosis_ai.eval._records import EvalRecord, RecordStatus
from osmosis_ai.rollout._outcome import RolloutOutcome
from osmosis_ai.rollout._types import RolloutSample, SampleError, SampleStatus

__all__ = ["outcome_records", "write_trace"]


def _error_fields(error: SampleError | None) -> tuple[str | None, str | None]:
    if error is None:
        return None, None
    return str(error.category.value), error.message


def _sample_status(sample: RolloutSample) -> RecordStatus:
    if sample.status is SampleStatus.FAILED or sample.error is not None:
        return "failed"
    if sample.remove_sample or sample.status is SampleStatus.SKIPPED:
        return "skipped"
    if sample.reward is None:
        return "failed"
    return "success"


def _record(outcome: RolloutOutcome, **fields: Any) -> EvalRecord:
    return EvalRecord(
        row_index=outcome.row_index,
        source_row_index=outcome.source_row_index,
        run_index=outcome.sample_index,
        rollout_id=outcome.rollout_id,
        duration_ms=outcome.duration_ms,
        **fields,
    )


def outcome_records(
    outcome: RolloutOutcome, *, pass_threshold: float
) -> list[tuple[EvalRecord, RolloutSample | None]]:
    """One record per sample of a runner outcome (one failed record if it has no sample).

    Returns ``(record, sample_or_None)`` pairs so the caller can write the sample's trace.
    """
    if not outcome.samples:
        error_type, error = _error_fields(outcome.error)
        record = _record(
            outcome,
            status="failed",
            error_type=error_type or "internal_error",
            error=error or "the rollout produced no sample",
        )
        return [(record, None)]
    out: list[tuple[EvalRecord, RolloutSample | None]] = []
    for sample in outcome.samples:
        status = _sample_status(sample)
        error_type, error = _error_fields(sample.error)
        if outcome.error is not None and status != "success" and sample.error is None:
            # The rollout itself failed (a timeout, say) before the grader could judge this
            # sample; an adapter may have marked it skipped, but the failure is what happened.
            status = "failed"
            error_type, error = _error_fields(outcome.error)
        if status == "failed" and error_type is None:
            error_type, error = "grader_error", "the grader set no reward for this sample"
        reward = sample.reward if status == "success" else None
        prompt_tokens = sum(c.prompt_tokens or len(c.prompt_token_ids or []) for c in sample.calls)
        completion_tokens = sum(
            c.completion_tokens or len(c.completion_token_ids or []) for c in sample.calls
        )
        record = _record(
            outcome,
            sample_id=sample.id,
            status=status,
            reward=reward,
            passed=(reward >= pass_threshold) if reward is not None else None,
            tokens=prompt_tokens + completion_tokens,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            num_calls=len(sample.calls),
            tool_calls=sum(len(c.tool_calls) for c in sample.calls),
            error_type=error_type,
            error=error,
            judge={
                k.removeprefix("judge_"): v
                for k, v in sample.metrics.items()
                if k.startswith("judge_")
            },
        )
        out.append((record, sample))
    return out


def trace_name(record: EvalRecord) -> str:
    sample = _safe_name(record.sample_id or "rollout")
    return f"traces/row{record.row_index:05d}-run{record.run_index:03d}-{sample}.json"


def _safe_name(name: str) -> str:
    """``name`` as one plain file-name part: a sample id (client-chosen) never becomes a path
    (``../``, ``/``, NUL ...); distinct ids stay distinct after cleaning."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "_", name)[:64] or "sample"
    if safe != name:
        safe += "-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return safe


def write_trace(
    run_dir: Path, record: EvalRecord, sample: RolloutSample | None, outcome: RolloutOutcome
) -> str:
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
        "label": outcome.label,
        "metadata": outcome.metadata,
        "messages": sample.messages if sample is not None else [],
        "calls": [c.model_dump(mode="json") for c in sample.calls] if sample is not None else [],
        "metrics": dict(sample.metrics) if sample is not None else {},
    }
    path = run_dir / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
    return rel
