"""The scoring half of a rollout: :class:`Grader` and :class:`GraderContext`."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from osmosis_ai.errors import RewardError
from osmosis_ai.rollout._types import Message, RolloutSample

__all__ = ["Grader", "GraderContext"]

TConfig = TypeVar("TConfig")


@dataclass(eq=False)
class GraderContext(Generic[TConfig]):
    """What a grader gets for one rollout.

    Attributes:
        samples: the rollout's successful samples, keyed by sample id.
        label: the row's ``ground_truth`` (``None`` when the dataset has none).
        metadata: the row's other columns.
        prompt: the row's prompt messages.
        rollout_id, row_index, sample_index, n_samples: which rollout of which row this is
            (a GRPO group is the ``n_samples`` rollouts of one row; group-relative graders
            such as ``osmosis_ai.grading.GroupJudge`` gather them by row).
    """

    samples: dict[str, RolloutSample]
    label: str | None
    metadata: dict[str, Any] = field(default_factory=dict)
    prompt: list[Message] = field(default_factory=list)
    config: TConfig | None = None
    artifacts_dir: Path | None = None
    rollout_id: str = ""
    row_index: int | None = None
    sample_index: int = 0
    n_samples: int = 1

    def set_sample_reward(self, sample_id: str, reward: float) -> None:
        """Set the reward of one sample. It must be a finite number."""
        if sample_id not in self.samples:
            known = ", ".join(sorted(self.samples)) or "none"
            raise RewardError(
                f"set_sample_reward: unknown sample id {sample_id!r} (samples: {known})"
            )
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            raise RewardError(
                f"set_sample_reward({sample_id!r}, {reward!r}): the reward must be a finite "
                f"number (int or float), got {type(reward).__name__}"
            )
        if not math.isfinite(reward):
            raise RewardError(
                f"set_sample_reward({sample_id!r}, {reward!r}): the reward must be finite"
            )
        self.samples[sample_id].reward = float(reward)

    def remove_sample(self, sample_id: str) -> None:
        """Exclude a sample from training and from eval metrics (counted as skipped)."""
        if sample_id not in self.samples:
            raise RewardError(f"remove_sample: unknown sample id {sample_id!r}")
        self.samples[sample_id].remove_sample = True


class Grader(ABC, Generic[TConfig]):
    """Turns a rollout's samples into rewards with ``ctx.set_sample_reward``.

    Every kept sample must get a reward; one left without is recorded as a grader failure.
    """

    def __init__(self, config: TConfig | None = None) -> None:
        self.config = config

    @abstractmethod
    async def grade(self, ctx: GraderContext[TConfig]) -> None:
        """Set a reward on each sample in ``ctx.samples``."""
