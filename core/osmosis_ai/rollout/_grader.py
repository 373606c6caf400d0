"""The scoring half of a rollout: :class:`Grader` and :class:`GraderContext`."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from osmosis_ai.errors import RewardError
from osmosis_ai.rollout._types import Message, RolloutSample

__all__ = ["Grader", "GraderContext"]

TConfig = TypeVar("TConfig")


@dataclass(eq=False, init=False)
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

    A rollout with one sample (osmosis-ai 0.3's model) can be graded with :attr:`sample` and
    :meth:`set_reward`, and the context built as ``GraderContext(label=..., sample=...)``.
    """

    samples: dict[str, RolloutSample]
    label: str | None
    metadata: dict[str, Any]
    prompt: list[Message]
    config: TConfig | None
    artifacts_dir: Path | None
    rollout_id: str
    row_index: int | None
    sample_index: int
    n_samples: int
    project_path: str | None

    def __init__(
        self,
        samples: dict[str, RolloutSample] | None = None,
        label: str | None = None,
        metadata: dict[str, Any] | None = None,
        prompt: list[Message] | None = None,
        config: TConfig | None = None,
        artifacts_dir: Path | None = None,
        rollout_id: str = "",
        row_index: int | None = None,
        sample_index: int = 0,
        n_samples: int = 1,
        *,
        sample: RolloutSample | None = None,
        project_path: str | None = None,
    ) -> None:
        if samples is not None and sample is not None:
            raise TypeError("GraderContext takes samples={...} or sample=..., not both")
        if sample is not None:
            samples = {sample.id: sample}
        self.samples = samples if samples is not None else {}
        self.label = label
        self.metadata = metadata if metadata is not None else {}
        self.prompt = prompt if prompt is not None else []
        self.config = config
        self.artifacts_dir = artifacts_dir
        self.rollout_id = rollout_id
        self.row_index = row_index
        self.sample_index = sample_index
        self.n_samples = n_samples
        self.project_path = project_path

    @property
    def sample(self) -> RolloutSample | None:
        """The rollout's one sample (``None`` when it has none), as osmosis-ai 0.3 graders read it.

        Raises:
            RewardError: the rollout has several samples (several agents): read
                ``ctx.samples`` and reward each with ``ctx.set_sample_reward(id, r)``.
        """
        if not self.samples:
            return None
        if len(self.samples) > 1:
            raise RewardError(self._several("ctx.sample"))
        return next(iter(self.samples.values()))

    def set_reward(self, reward: float) -> None:
        """Set the reward of the rollout's one sample (osmosis-ai 0.3's single-sample API).

        Raises:
            RewardError: no sample, several samples, or a reward that is not a finite number.
        """
        if not self.samples:
            raise RewardError(
                "ctx.set_reward: this rollout has no sample to reward (the workflow produced "
                "none: return its messages, or build an OsmosisStrandsAgent / run an "
                "OsmosisAgent inside run())"
            )
        if len(self.samples) > 1:
            raise RewardError(self._several("ctx.set_reward"))
        self.set_sample_reward(next(iter(self.samples)), reward)

    def get_samples(self) -> dict[str, RolloutSample]:
        """The samples keyed by id (the same dict as :attr:`samples`)."""
        return self.samples

    def _several(self, what: str) -> str:
        ids = ", ".join(sorted(self.samples))
        return (
            f"{what} needs a rollout with one sample, but this one has {len(self.samples)} "
            f"({ids}). Read ctx.samples and reward each with ctx.set_sample_reward(id, reward)"
        )

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
