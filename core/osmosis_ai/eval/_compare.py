"""Did the trained model get better, and is that more than noise? A paired bootstrap.

Two eval runs of the same rows (a checkpoint and its base model, or any two models) are paired
row by row: each row's value is the mean reward of its graded samples, the difference is
candidate minus baseline, and the confidence interval comes from resampling rows with
replacement (percentile method). Pairing by row removes the variance between easy and hard
rows, so a real gain shows with fewer rows than two independent means would need.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from osmosis_ai.eval._records import EvalRecord

__all__ = ["Comparison", "Measure", "compare_records", "paired_bootstrap", "row_passes", "row_rewards"]

Measure = Literal["reward", "pass"]
"""What a comparison pairs: each row's mean reward, or its pass rate."""


class Comparison(BaseModel):
    """``comparison.json``: candidate vs baseline on the same rows."""

    candidate: str = Field(description="The model evaluated (e.g. a checkpoint RUN:STEP).")
    baseline: str = Field(description="The model compared against (e.g. the base model).")
    rows: int = Field(description="Rows graded under both models (the paired sample).")
    unpaired_rows: int = Field(description="Rows left out: no graded sample under one model.")
    candidate_mean: float | None
    baseline_mean: float | None
    diff: float | None = Field(description="Mean over rows of candidate - baseline reward.")
    ci_low: float | None
    ci_high: float | None
    confidence: float
    resamples: int
    seed: int
    candidate_failed: int = Field(description="Failed samples of the candidate.")
    baseline_failed: int = Field(description="Failed samples of the baseline.")
    measure: Measure = Field(
        default="reward",
        description="What is paired: each row's mean reward, or its pass rate (the share of "
        "its samples at or above the pass threshold; a failed sample counts as not passed).",
    )

    @property
    def verdict(self) -> str:
        """``better``, ``worse`` or ``no clear difference`` (the interval contains 0)."""
        if self.ci_low is None or self.ci_high is None:
            return "not enough paired rows"
        if self.ci_low > 0:
            return "better"
        if self.ci_high < 0:
            return "worse"
        return "no clear difference"


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def paired_bootstrap(
    candidate: Sequence[float],
    baseline: Sequence[float],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Mean paired difference and its bootstrap confidence interval: ``(diff, low, high)``.

    ``candidate[i]`` and ``baseline[i]`` are the same row's values. Rows are resampled with
    replacement ``resamples`` times with a generator seeded by ``seed``, so the same inputs
    always give the same interval.
    """
    if len(candidate) != len(baseline):
        raise ValueError(
            f"paired values need the same length (got {len(candidate)} and {len(baseline)})"
        )
    if not candidate:
        raise ValueError("paired_bootstrap needs at least one pair")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1 (got {resamples})")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1 (got {confidence})")
    diffs = [c - b for c, b in zip(candidate, baseline, strict=True)]
    n = len(diffs)
    mean = math.fsum(diffs) / n
    rng = random.Random(seed)
    means = sorted(math.fsum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    alpha = (1.0 - confidence) / 2.0
    return mean, _quantile(means, alpha), _quantile(means, 1.0 - alpha)


def _row_key(record: EvalRecord) -> int:
    return record.source_row_index if record.source_row_index is not None else record.row_index


def row_rewards(records: Iterable[EvalRecord]) -> dict[int, float]:
    """Each row's mean reward over its graded samples (rows with none are absent)."""
    sums: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if r.status == "success" and r.reward is not None:
            sums[_row_key(r)].append(r.reward)
    return {row: math.fsum(v) / len(v) for row, v in sums.items()}


def row_passes(records: Iterable[EvalRecord]) -> dict[int, float]:
    """Each row's pass rate over its samples, failed ones counting as not passed (as the eval
    summary's pass rate counts them); skipped samples are left out."""
    outcomes: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if r.status != "skipped":
            outcomes[_row_key(r)].append(1.0 if r.status == "success" and r.passed else 0.0)
    return {row: math.fsum(v) / len(v) for row, v in outcomes.items()}


def compare_records(
    candidate: Sequence[EvalRecord],
    baseline: Sequence[EvalRecord],
    *,
    candidate_name: str,
    baseline_name: str,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    measure: Measure = "reward",
) -> Comparison:
    """Pair two eval runs' records by dataset row and bootstrap the difference of ``measure``."""
    values = row_passes if measure == "pass" else row_rewards
    a, b = values(candidate), values(baseline)
    rows = sorted(set(a) & set(b))
    every = {_row_key(r) for r in candidate} | {_row_key(r) for r in baseline}
    ca = [a[r] for r in rows]
    cb = [b[r] for r in rows]
    diff = low = high = None
    if rows:
        diff, low, high = paired_bootstrap(
            ca, cb, resamples=resamples, confidence=confidence, seed=seed
        )
    return Comparison(
        candidate=candidate_name,
        baseline=baseline_name,
        rows=len(rows),
        unpaired_rows=len(every) - len(rows),
        candidate_mean=math.fsum(ca) / len(ca) if ca else None,
        baseline_mean=math.fsum(cb) / len(cb) if cb else None,
        diff=diff,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        candidate_failed=sum(1 for r in candidate if r.status == "failed"),
        baseline_failed=sum(1 for r in baseline if r.status == "failed"),
        measure=measure,
    )
