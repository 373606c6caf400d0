"""What one step's rollouts produced, and turning it into advantage-weighted sequences."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from osmosis_ai.config import AlgorithmConfig
from osmosis_ai.rollout import LLMCall
from osmosis_ai.rollout.running import RolloutRow
from osmosis_trainer.grpo import group_advantages
from osmosis_trainer.loop._batch import TrainSequence

__all__ = [
    "GradedSample",
    "RolloutSource",
    "SequenceData",
    "StepRollouts",
    "TrainBatch",
    "build_train_batch",
]


@dataclass(frozen=True)
class SequenceData:
    """Token data of one trajectory piece, as the trajectory builder produced it."""

    token_ids: list[int]
    loss_mask: list[int]
    sampler_logprobs: list[float]


@dataclass
class GradedSample:
    """One successful, graded sample of one rollout.

    Attributes:
        group_id: the GRPO group: one row's rollouts, as the runner grouped them.
        rollout_id: the rollout that produced it; rollouts weigh equally in the loss.
        sample_id: the sample's id within the rollout ("main" unless several agents ran).
        reward: the grader's reward.
        sequences: the sample's token sequences (several when turns could not be merged).
        completion_tokens: tokens the policy generated for it (all calls).
        truncated: True when a completion hit the length limit.
    """

    group_id: int
    rollout_id: str
    sample_id: str
    reward: float
    sequences: list[SequenceData]
    completion_tokens: int = 0
    truncated: bool = False
    last_call: LLMCall | None = None
    """The sample's last policy call (its messages are the conversation), for traces."""
    model_calls: int = 0
    """Policy calls (turns) the sample made."""
    tool_calls: int = 0
    """Tool calls the policy emitted over those turns."""


@dataclass
class StepRollouts:
    """Everything one step's rollouts produced, including the failures (counted, not scored)."""

    samples: list[GradedSample] = field(default_factory=list)
    n_rollouts: int = 0
    n_failed: int = 0
    failure_reasons: Counter[str] = field(default_factory=Counter)
    failure_examples: list[str] = field(default_factory=list)
    n_untrainable: int = 0
    """Successful samples with no usable token data (removed by the grader, or no calls)."""
    prefix_mismatch: int = 0
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def failure_rate(self) -> float:
        return self.n_failed / self.n_rollouts if self.n_rollouts else 0.0


class RolloutSource(Protocol):
    """Produces graded samples for a batch of rows and serves new adapters to the policy.

    The rows are the ones the :class:`~osmosis_trainer.loop.Trainer` was given, as the runner
    reads them (:class:`~osmosis_ai.data.DatasetRow` is one).
    """

    async def collect(
        self, rows: Sequence[RolloutRow], *, step: int, n_samples: int | None = None
    ) -> StepRollouts:
        """Run ``n_samples`` rollouts per row (the configured group size when ``None``)."""
        ...

    async def push_adapter(self, path: Path, version: int) -> None:
        """Make the policy serve the PEFT adapter in ``path`` as ``version``."""
        ...


@dataclass
class TrainBatch:
    """The sequences to train on plus the batch's advantage bookkeeping."""

    sequences: list[TrainSequence]
    n_groups: int
    n_zero_variance_groups: int
    n_samples: int


def build_train_batch(samples: Sequence[GradedSample], algorithm: AlgorithmConfig) -> TrainBatch:
    """Compute group advantages and expand samples into weighted training sequences.

    Each sample's advantage comes from its group (row), scaled by ``scale_rewards``. A rollout
    that yields ``k`` sequences gives each weight ``1/k``, so every rollout counts once however
    its turns were split. Zero-variance groups carry no signal; with
    ``skip_zero_variance_groups`` they are left out. ``mask_truncated_completions`` drops
    samples whose completion hit the length limit.
    """
    mask_truncated = algorithm.mask_truncated_completions
    kept = [s for s in samples if not (mask_truncated and s.truncated)]
    if not kept:
        return TrainBatch([], 0, 0, 0)
    rewards = torch.tensor([s.reward for s in kept], dtype=torch.float64)  # [N]
    groups = torch.tensor([s.group_id for s in kept], dtype=torch.long)  # [N]
    adv = group_advantages(rewards, groups, scale=algorithm.scale_rewards)
    per_rollout = Counter[str]()
    for s in kept:
        per_rollout[s.rollout_id] += len(s.sequences)
    out: list[TrainSequence] = []
    for i, s in enumerate(kept):
        if algorithm.skip_zero_variance_groups and bool(adv.zero_variance[i]):
            continue
        for seq in s.sequences:
            out.append(
                TrainSequence(
                    token_ids=list(seq.token_ids),
                    loss_mask=list(seq.loss_mask),
                    sampler_logprobs=list(seq.sampler_logprobs),
                    advantage=float(adv.advantages[i]),
                    weight=1.0 / per_rollout[s.rollout_id],
                    reward=s.reward,
                    group_id=s.group_id,
                    rollout_id=s.rollout_id,
                    truncated=s.truncated,
                )
            )
    return TrainBatch(out, adv.n_groups, adv.n_zero_variance_groups, len(kept))
