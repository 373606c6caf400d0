"""Group-relative advantages (GRPO).

Rewards arrive flat, one per sample, with the id of the group (dataset row) each belongs to.
Groups may have different sizes because failed rollouts are dropped before this point.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from osmosis_ai.config import ScaleRewards

__all__ = ["AdvantageResult", "ScaleRewards", "group_advantages"]

_EQUAL_TOL = 1e-6


@dataclass(frozen=True)
class AdvantageResult:
    """Advantages and the zero-variance bookkeeping of one batch.

    Attributes:
        advantages: ``[N]`` one advantage per sample.
        zero_variance: ``[N]`` True where the sample's group has all-equal rewards (or one
            member), so it carries no learning signal.
        n_groups: how many distinct groups there were.
        n_zero_variance_groups: how many of them had all-equal rewards.
    """

    advantages: torch.Tensor
    zero_variance: torch.Tensor
    n_groups: int
    n_zero_variance_groups: int


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    scale: ScaleRewards,
    eps: float = 1e-4,
) -> AdvantageResult:
    """``A_i = (r_i - mean_G(r)) / (std + eps)`` with the std chosen by ``scale``.

    Args:
        rewards: ``[N]`` float rewards.
        group_ids: ``[N]`` integer group of each reward (any integers; need not be contiguous).
        scale: ``"group"`` divides by the group's std (unbiased), ``"batch"`` by the std of all
            rewards in the batch, ``"none"`` does not divide (Dr. GRPO).
        eps: added to the std so a near-constant group does not explode.

    Returns:
        An :class:`AdvantageResult`. Zero-variance groups get advantage exactly 0.
    """
    if rewards.ndim != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must be 1-D of equal length, got {tuple(rewards.shape)} "
            f"and {tuple(group_ids.shape)}"
        )
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    r = rewards.to(torch.float64)  # [N]; float64 so hand-computed values match exactly
    _, inverse = torch.unique(group_ids, return_inverse=True)  # inverse: [N] in 0..G-1
    n_groups = int(inverse.max().item()) + 1 if r.numel() else 0
    count = torch.zeros(n_groups, dtype=r.dtype).index_add_(0, inverse, torch.ones_like(r))  # [G]
    total = torch.zeros(n_groups, dtype=r.dtype).index_add_(0, inverse, r)  # [G]
    mean = total / count  # [G]
    centered = r - mean[inverse]  # [N]
    sq = torch.zeros(n_groups, dtype=r.dtype).index_add_(0, inverse, centered**2)  # [G]
    g_max = torch.full((n_groups,), -torch.inf, dtype=r.dtype).scatter_reduce(
        0, inverse, r, reduce="amax"
    )  # [G]
    g_min = torch.full((n_groups,), torch.inf, dtype=r.dtype).scatter_reduce(
        0, inverse, r, reduce="amin"
    )  # [G]
    zero_group = (g_max - g_min <= _EQUAL_TOL) | (count < 2)  # [G]
    if scale == "group":
        std = torch.sqrt(sq / (count - 1).clamp(min=1))  # [G] unbiased, like torch.std
        adv = centered / (std[inverse] + eps)  # [N]
    elif scale == "batch":
        batch_std = r.std() if r.numel() > 1 else r.new_zeros(())
        adv = centered / (batch_std + eps)
    else:
        adv = centered
    zero = zero_group[inverse]  # [N]
    adv = torch.where(zero, torch.zeros_like(adv), adv)
    return AdvantageResult(
        advantages=adv.to(rewards.dtype if rewards.is_floating_point() else torch.float32),
        zero_variance=zero,
        n_groups=n_groups,
        n_zero_variance_groups=int(zero_group.sum().item()),
    )
