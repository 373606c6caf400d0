"""What a training run changed: first vs last reward, and a held-out comparison when one ran.

Pure functions over the run's ``metrics.jsonl`` records (one dict per line), so the end screen of
``osmosis train submit``, the ``learning`` benchmark and tests all compute the same numbers.
A single step's reward is noisy (a handful of prompts), so the summary compares the mean of
the first ``window`` training steps with the mean of the last ``window``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HeldOut",
    "LearningSummary",
    "format_summary",
    "held_out_of",
    "heldout_lines",
    "summarize_learning",
]

WINDOW = 3
"""Steps averaged at each end of the run."""


@dataclass(frozen=True)
class HeldOut:
    """The trained adapter against the base model on rows left out of training."""

    base: float
    trained: float
    ci_low: float
    ci_high: float
    rows: int

    @property
    def diff(self) -> float:
        return self.trained - self.base

    @property
    def verdict(self) -> str:
        """better / worse when the interval excludes 0, else no clear change."""
        return "better" if self.ci_low > 0 else "worse" if self.ci_high < 0 else "no clear change"

    def reward_text(self) -> str:
        """``mean reward: base B → trained T (+D, 95% CI [L, H]: verdict)``, as the end screen,
        the training log and ``train info`` print it."""
        return (
            f"mean reward: base {self.base:.3f} → trained {self.trained:.3f} "
            f"({self.diff:+.3f}, 95% CI [{self.ci_low:+.3f}, {self.ci_high:+.3f}]: {self.verdict})"
        )


@dataclass(frozen=True)
class LearningSummary:
    """First vs last training reward of one run (``first``/``last``: means over ``window`` steps)."""

    steps: int
    window: int
    first: float
    last: float
    held_out: HeldOut | None = None
    validation: tuple[float, float, int] | None = None
    """First and last validation reward, and how many validations ran (``[evaluation]``)."""

    @property
    def change(self) -> float:
        return self.last - self.first


def held_out_of(comparison: Any) -> HeldOut | None:
    """The :class:`HeldOut` of an eval ``Comparison``, or of its JSON (``heldout.json`` read as
    a dict); ``None`` without a paired result."""
    if comparison is None:
        return None
    values: list[float] = []
    for key in ("baseline_mean", "candidate_mean", "ci_low", "ci_high", "rows"):
        value = comparison.get(key) if isinstance(comparison, Mapping) else getattr(
            comparison, key, None
        )
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
        values.append(float(value))
    base, trained, low, high, rows = values
    return HeldOut(base=base, trained=trained, ci_low=low, ci_high=high, rows=int(rows))


def _reward(record: Mapping[str, Any]) -> float | None:
    value = record.get("reward_mean")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return None
    return float(value)


def summarize_learning(
    records: Iterable[Mapping[str, Any]],
    *,
    window: int = WINDOW,
    held_out: HeldOut | None = None,
) -> LearningSummary | None:
    """Summarize the training records (``kind`` "train" or absent) and the validation ones ("eval").

    Returns None when no training step reported a reward. With fewer than ``2 * window`` steps
    the two windows shrink to half the steps each (one step each for a 2-step run), so they
    never overlap; a one-step run compares that step with itself.
    """
    rewards: list[float] = []
    validation: list[float] = []
    for record in records:
        reward = _reward(record)
        kind = record.get("kind", "train")
        if kind in ("eval", "val"):  # the periodic validation ([evaluation] eval_interval)
            value = record.get("val_reward_mean", record.get("reward_mean"))
            if isinstance(value, (int, float)) and math.isfinite(value):
                validation.append(float(value))
        elif kind == "train" and reward is not None:
            rewards.append(reward)
    if not rewards:
        return None
    w = max(1, min(window, len(rewards) // 2))
    return LearningSummary(
        steps=len(rewards),
        window=w,
        first=statistics.fmean(rewards[:w]),
        last=statistics.fmean(rewards[-w:]),
        held_out=held_out,
        validation=(validation[0], validation[-1], len(validation)) if validation else None,
    )


def format_summary(summary: LearningSummary) -> list[str]:
    """Plain end-screen lines (no markup) for ``summary``."""
    span = "step" if summary.window == 1 else f"{summary.window} steps"
    lines = [
        f"reward: first {span} {summary.first:.3f} → last {span} {summary.last:.3f} "
        f"({summary.change:+.3f} over {summary.steps} steps)"
    ]
    if summary.validation is not None:
        first, last, count = summary.validation
        lines.append(
            f"validation reward: {first:.3f} → {last:.3f} ({count} evaluations)"
            if count > 1 else f"validation reward: {first:.3f} (1 evaluation)"
        )
    held = summary.held_out
    if held is not None:
        lines.append(f"held-out ({held.rows} rows) {held.reward_text()}")
    return lines


_ROLE_NAMES = {"base": "base", "warm": "warm start", "trained": "trained"}


def _rate(value: Any, fmt: str) -> str:
    """``value`` in ``fmt``, or a dash as wide as the field when there is no value."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        return format(value, fmt)
    width = "".join(c for c in fmt.split(".")[0] if c.isdigit())
    return "-".rjust(int(width or 0))


def _pass_diff(label: str, comparison: Any) -> str | None:
    if not isinstance(comparison, Mapping) or comparison.get("diff") is None:
        return None
    low, high = comparison.get("ci_low"), comparison.get("ci_high")
    verdict = (
        "better" if low is not None and low > 0
        else "worse" if high is not None and high < 0 else "no clear change"
    )
    return (
        f"  {label}: pass rate {_rate(comparison['diff'], '+.3f')}, 95% CI "
        f"[{_rate(low, '+.3f')}, {_rate(high, '+.3f')}] ({verdict})"
    )


def heldout_lines(report: Mapping[str, Any] | None) -> list[str]:
    """Plain lines for a run's ``heldout.json`` (as a dict): for each held-out file, pass rate
    and tool use of the base model, the warm start and the trained checkpoint, and the paired
    pass-rate differences. A report without per-model results (an older run) gives no lines."""
    if not isinstance(report, Mapping):
        return []
    lines = _set_lines(report)
    for other in report.get("sets") or []:
        if isinstance(other, Mapping):
            lines.extend(_set_lines(other))
    return lines


def _set_lines(report: Mapping[str, Any]) -> list[str]:
    """One held-out file's block: a header naming it, a row per model, the paired differences."""
    models = [m for m in report.get("models") or [] if isinstance(m, Mapping)]
    if not models:
        return []
    name, dataset = report.get("name"), report.get("dataset")
    title = "held-out" if name is None else f"held-out {name}" + (f" ({dataset})" if dataset else "")
    lines = [
        f"{title}, {report.get('rows')} rows:",
        f"  {'':<12}{'pass':>7}{'tool calls':>12}{'calls/rollout':>15}{'turns':>7}",
    ]
    for m in models:
        lines.append(
            f"  {_ROLE_NAMES.get(str(m.get('role')), str(m.get('role'))):<12}"
            f"{_rate(m.get('pass_rate'), '7.3f')}"
            f"{_rate(m.get('tool_call_rate'), '12.0%')}"
            f"{_rate(m.get('tool_calls_per_rollout'), '15.2f')}"
            f"{_rate(m.get('turns_per_rollout'), '7.2f')}"
        )
    for label, key in (("trained vs warm start", "pass_vs_warm"), ("trained vs base", "pass_vs_base")):
        line = _pass_diff(label, report.get(key))
        if line is not None:
            lines.append(line)
    return lines
