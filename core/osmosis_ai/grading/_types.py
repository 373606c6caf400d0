"""The data a judge produces: its scale, its verdicts (failures included) and what it cost."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from osmosis_ai.errors import OsmosisError

__all__ = ["JudgeError", "JudgeUsage", "JudgeVerdict", "Scale"]


class Scale(BaseModel):
    """The range a judge scores on, which is also the reward range.

    In ``"json"`` mode the judge writes a number in ``[min, max]``. In ``"levels"`` mode
    (G-Eval style) it answers with a whole level ``1..levels``; the reward is the expected
    level under the judge's probabilities, mapped linearly onto ``[min, max]``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: float = 0.0
    """The worst score."""
    max: float = 1.0
    """The best score."""
    levels: int = Field(default=5, ge=2, le=9)
    """How many whole levels the judge picks from in ``"levels"`` mode (single digits)."""

    @model_validator(mode="after")
    def _ordered(self) -> Scale:
        if not self.max > self.min:
            raise ValueError(f"the scale needs max > min (got min={self.min}, max={self.max})")
        return self

    def from_level(self, level: float) -> float:
        """Map a level in ``[1, levels]`` (possibly fractional) onto ``[min, max]``."""
        return self.min + (level - 1.0) / (self.levels - 1) * (self.max - self.min)

    def contains(self, score: float) -> bool:
        return self.min <= score <= self.max


class JudgeUsage(BaseModel):
    """Counts of judge work; verdicts carry their own, judges keep running totals."""

    calls: int = 0
    """Model calls made (retries included; cache hits make none)."""
    cache_hits: int = 0
    retries: int = 0
    """Calls repeated because the answer could not be parsed."""
    failures: int = 0
    """Verdicts that ended as failures (no score)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    """Summed over priced calls (LiteLLM's cost map; local models cost 0)."""
    unpriced_calls: int = 0
    """Calls whose cost is unknown (a model missing from the cost map)."""

    def add(self, other: JudgeUsage) -> None:
        """Add ``other``'s counts to these, in place."""
        for name in type(self).model_fields:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_metrics(self, prefix: str = "judge_") -> dict[str, float]:
        """Flat float metrics (for ``RolloutSample.metrics`` and training metrics)."""
        return {f"{prefix}{k}": float(v) for k, v in self.model_dump().items()}


class JudgeVerdict(BaseModel):
    """One sample's judgement, or the failure to get one (``ok`` False, ``score`` None).

    A failure is data: it keeps the judge's raw replies and the reason they were refused; it is
    never turned into a score of 0.
    """

    ok: bool
    score: float | None = None
    reasons: str = ""
    error: str | None = None
    raw: list[str] = Field(default_factory=list)
    """The judge's raw replies, one per attempt (kept for failures and for audit)."""
    probabilities: dict[str, float] | None = None
    """Levels mode: the probability of each level, as the judge gave it."""
    positions: list[int] | None = None
    """Group judge: this sample's 1-based position in each of the repeated calls."""
    cached: bool = False
    usage: JudgeUsage = Field(default_factory=JudgeUsage)
    """What this verdict cost (zero calls when it came from the cache)."""

    def cache_payload(self) -> dict[str, Any]:
        """The part worth caching: the judgement, not its cost."""
        return self.model_dump(include={"ok", "score", "reasons", "probabilities", "positions"})


class JudgeError(OsmosisError):
    """A judge could not score a sample: its replies stayed malformed, or the model failed.

    Raised by ``judge.grade(ctx)`` so the rollout is recorded as a grader failure with the
    judge's raw text (never scored 0). Attributes: ``verdict`` (the failed verdict).
    """

    def __init__(self, message: str, verdict: JudgeVerdict) -> None:
        self.verdict = verdict
        super().__init__(message)
