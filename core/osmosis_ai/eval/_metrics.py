"""Evaluation metrics as pure functions: reward statistics, pass rate, unbiased pass@k."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from osmosis_ai.eval._records import EvalRecord

__all__ = ["EvalSummary", "RewardStats", "pass_at_k", "pass_at_k_values", "summarize"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` attempts of which ``c`` passed.

    ``1 - C(n - c, k) / C(n, k)`` (Chen et al., 2021), computed as a product so large ``n``
    neither overflows nor loses precision.

    Raises:
        ValueError: unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_at_k_values(n: int) -> list[int]:
    """The k reported for ``n`` runs per row: powers of two up to ``n`` (none when n == 1)."""
    if n <= 1:
        return []
    return [2**i for i in range(int(math.log2(n)) + 1)]


class RewardStats(BaseModel):
    """Statistics of the rewards of successful samples (``None`` when there are none)."""

    count: int = 0
    mean: float | None = None
    median: float | None = None
    std: float | None = Field(default=None, description="Population standard deviation.")
    min: float | None = None
    max: float | None = None


class EvalSummary(BaseModel):
    """What ``osmosis eval run`` prints at the end and writes to ``summary.json``."""

    samples: int
    success: int
    failed: int
    skipped: int
    pass_threshold: float
    passed: int
    pass_rate: float | None = Field(description="passed / non-skipped samples (failed count).")
    reward: RewardStats
    pass_at_k: dict[str, float] = Field(default_factory=dict)
    pass_at_k_groups: int = Field(0, description="(row, sample id) groups behind pass@k.")
    failures_by_reason: dict[str, int] = Field(default_factory=dict)
    failure_examples: dict[str, str] = Field(
        default_factory=dict, description="The first error message of each failure reason."
    )
    tool_call_rate: float | None = Field(
        default=None, description="Share of samples (failed count) with at least one tool call."
    )
    tool_calls_per_rollout: float | None = Field(
        default=None, description="Mean tool calls per sample (failed count)."
    )
    turns_per_rollout: float | None = Field(
        default=None, description="Mean policy calls (turns) per sample (failed count)."
    )
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_per_sample: float | None = None
    latency_ms: dict[str, float] = Field(default_factory=dict)
    wall_time_s: float | None = None
    judge: dict[str, float] = Field(
        default_factory=dict, description="LLM-judge usage summed over the samples (if any)."
    )


def reward_stats(rewards: Sequence[float]) -> RewardStats:
    if not rewards:
        return RewardStats()
    return RewardStats(
        count=len(rewards),
        mean=statistics.fmean(rewards),
        median=statistics.median(rewards),
        std=statistics.pstdev(rewards),
        min=min(rewards),
        max=max(rewards),
    )


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted, non-empty sequence."""
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def _first_errors(failed: Sequence[EvalRecord], limit: int = 300) -> dict[str, str]:
    examples: dict[str, str] = {}
    for r in failed:
        reason = r.error_type or "unknown"
        if reason not in examples and r.error:
            examples[reason] = r.error if len(r.error) <= limit else r.error[: limit - 3] + "..."
    return examples


def summarize(
    records: Iterable[EvalRecord],
    *,
    pass_threshold: float,
    n: int,
    wall_time_s: float | None = None,
) -> EvalSummary:
    """Aggregate result records into the eval summary.

    A sample passes when its reward is at least ``pass_threshold``; failed samples count as not
    passed, skipped ones (``remove_sample``) are left out. pass@k is averaged over the
    (row, sample id) groups that have at least k non-skipped runs.
    """
    recs = list(records)
    success = [r for r in recs if r.status == "success"]
    failed = [r for r in recs if r.status == "failed"]
    skipped = [r for r in recs if r.status == "skipped"]
    rewards = [r.reward for r in success if r.reward is not None]
    passed = sum(1 for x in rewards if x >= pass_threshold)
    considered = len(success) + len(failed)

    groups: dict[tuple[int, str], list[bool]] = defaultdict(list)
    for r in success + failed:
        ok = r.status == "success" and r.reward is not None and r.reward >= pass_threshold
        groups[(r.row_index, r.sample_id or "main")].append(ok)
    pass_k: dict[str, float] = {}
    used: set[tuple[int, str]] = set()
    for k in pass_at_k_values(n):
        values = []
        for key, outcomes in groups.items():
            if len(outcomes) >= k:
                values.append(pass_at_k(len(outcomes), sum(outcomes), k))
                used.add(key)
        if values:
            pass_k[f"pass@{k}"] = statistics.fmean(values)

    durations = sorted(r.duration_ms for r in recs)
    latency: dict[str, Any] = {}
    if durations:
        latency = {
            "mean": statistics.fmean(durations),
            "p50": _percentile(durations, 50),
            "p95": _percentile(durations, 95),
            "max": durations[-1],
        }
    prompt_tokens = sum(r.prompt_tokens for r in recs)
    completion_tokens = sum(r.completion_tokens for r in recs)
    acted = success + failed  # the pass rate's samples: tool use is read on the same ones
    return EvalSummary(
        samples=len(recs),
        success=len(success),
        failed=len(failed),
        skipped=len(skipped),
        pass_threshold=pass_threshold,
        passed=passed,
        pass_rate=(passed / considered) if considered else None,
        reward=reward_stats(rewards),
        pass_at_k=pass_k,
        pass_at_k_groups=len(used),
        failures_by_reason=dict(Counter(r.error_type or "unknown" for r in failed).most_common()),
        failure_examples=_first_errors(failed),
        tool_call_rate=(sum(r.tool_calls > 0 for r in acted) / considered) if considered else None,
        tool_calls_per_rollout=(
            (sum(r.tool_calls for r in acted) / considered) if considered else None
        ),
        turns_per_rollout=(sum(r.num_calls for r in acted) / considered) if considered else None,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        tokens_per_sample=((prompt_tokens + completion_tokens) / len(recs)) if recs else None,
        latency_ms=latency,
        wall_time_s=wall_time_s,
        judge=_judge_totals(recs),
    )


def _judge_totals(records: Sequence[EvalRecord]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for r in records:
        for key, value in r.judge.items():
            totals[key] = totals.get(key, 0.0) + value
    return totals
