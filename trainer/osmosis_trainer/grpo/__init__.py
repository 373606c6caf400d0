"""GRPO math as small pure functions (advantages, losses, importance sampling, masks).

All functions take and return tensors and carry shape comments; the training loop
(:mod:`osmosis_trainer.loop`) only orchestrates them.
"""

from __future__ import annotations

from osmosis_trainer.grpo.advantages import AdvantageResult, ScaleRewards, group_advantages
from osmosis_trainer.grpo.importance import ISMode, ISResult, importance_weights
from osmosis_trainer.grpo.losses import (
    LossNormalizers,
    LossType,
    aggregate_token_loss,
    clipped_token_loss,
    entropy_from_logits,
    entropy_from_logprobs,
    k3_kl,
    masked_mean,
)
from osmosis_trainer.grpo.masks import require_nonempty, shift_mask

__all__ = [
    "AdvantageResult",
    "ISMode",
    "ISResult",
    "LossNormalizers",
    "LossType",
    "ScaleRewards",
    "aggregate_token_loss",
    "clipped_token_loss",
    "entropy_from_logits",
    "entropy_from_logprobs",
    "group_advantages",
    "importance_weights",
    "k3_kl",
    "masked_mean",
    "require_nonempty",
    "shift_mask",
]
