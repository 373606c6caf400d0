"""What the runner hands back: :class:`RolloutOutcome` per rollout, :class:`RolloutGroup` per row,
and how exceptions become :class:`~osmosis_ai.rollout.SampleError` data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from osmosis_ai.errors import PolicyCallError, RewardError
from osmosis_ai.rollout._types import (
    ErrorCategory,
    Message,
    RolloutSample,
    SampleError,
    SampleStatus,
)

__all__ = ["RolloutGroup", "RolloutOutcome", "RolloutRow", "classify_exception"]


class RolloutRow(Protocol):
    """What the runner reads of a dataset row (:class:`osmosis_ai.data.DatasetRow` is one)."""

    @property
    def row_index(self) -> int: ...

    @property
    def prompt(self) -> Sequence[Message]: ...

    @property
    def label(self) -> str | None: ...

    @property
    def metadata(self) -> Mapping[str, Any]: ...

Where = Literal["workflow", "grader", "runner"]


def classify_exception(exc: BaseException, where: Where) -> SampleError:
    """Map an exception to its error category.

    ``TimeoutError`` -> timeout; ``PolicyCallError`` -> http_error; ``RewardError``,
    ``ValueError``, ``TypeError``, ``AssertionError`` -> validation_error; anything else ->
    agent_error (workflow), grader_error (grader) or internal_error (runner).
    """
    if isinstance(exc, TimeoutError):
        category = ErrorCategory.TIMEOUT
    elif isinstance(exc, PolicyCallError):
        category = ErrorCategory.HTTP_ERROR
    elif isinstance(exc, RewardError | ValueError | TypeError | AssertionError):
        category = ErrorCategory.VALIDATION_ERROR
    elif where == "workflow":
        category = ErrorCategory.AGENT_ERROR
    elif where == "grader":
        category = ErrorCategory.GRADER_ERROR
    else:
        category = ErrorCategory.INTERNAL_ERROR
    text = str(exc)
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return SampleError(category=category, message=message, where=where)


class RolloutOutcome(BaseModel):
    """The result of one rollout (one workflow run for one row and sample index).

    ``status`` is ``success`` when at least one sample succeeded, ``skipped`` when the grader
    removed every sample, and ``failed`` otherwise (``error`` then says why: the workflow's or
    grader's error, or the first failed sample's). Failed samples carry their own ``error`` and
    never a reward.
    """

    model_config = ConfigDict(extra="forbid")

    rollout_id: str
    row_index: int
    sample_index: int
    samples: list[RolloutSample] = Field(default_factory=list)
    status: SampleStatus
    error: SampleError | None = None
    duration_ms: float = 0.0
    label: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    source_row_index: int | None = None

    @property
    def ok(self) -> bool:
        """True when the rollout succeeded."""
        return self.status is SampleStatus.SUCCESS

    @property
    def reward(self) -> float | None:
        """The mean reward of the successful, kept samples (``None`` when there is none)."""
        rewards = [
            s.reward
            for s in self.samples
            if s.status is SampleStatus.SUCCESS and not s.remove_sample and s.reward is not None
        ]
        return sum(rewards) / len(rewards) if rewards else None

    def sample(self, sample_id: str = "main") -> RolloutSample | None:
        """The sample with id ``sample_id``, if the rollout produced one."""
        return next((s for s in self.samples if s.id == sample_id), None)


@dataclass
class RolloutGroup:
    """All ``n_samples`` outcomes of one dataset row (a GRPO group), by sample index."""

    row: RolloutRow
    """The row the group was run for."""
    outcomes: list[RolloutOutcome]
    """The row's rollouts, sorted by sample index."""
    position: int = 0
    """The row's position in the rows given to the run (groups finish in any order)."""
