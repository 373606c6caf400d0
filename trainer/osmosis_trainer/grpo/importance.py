"""Truncated importance-sampling correction for the sampler/trainer mismatch.

The inference engine (vLLM, or the HF engine in another precision) samples from a distribution
that differs slightly from the trainer's. With ``w = exp(logp_old_train - logp_sampler)`` the
detached weight ``w`` multiplies each token's loss, bounded so a rare large ratio cannot blow
up the update. Shapes: ``B`` sequences, ``T`` token positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["ISMode", "ISResult", "importance_weights"]

ISMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@dataclass(frozen=True)
class ISResult:
    """Weights and diagnostics.

    Attributes:
        weights: ``[B, T]`` detached weights to multiply into the per-token loss (0 off-mask).
        ratio_mean: masked mean of the raw (unbounded) weight.
        ratio_min: masked min of the raw weight.
        ratio_max: masked max of the raw weight.
        clipped_frac: fraction of masked tokens whose weight was truncated or masked.
        mismatch_kl: masked mean of the k3 estimate of KL(sampler || trainer).
    """

    weights: torch.Tensor
    ratio_mean: float
    ratio_min: float
    ratio_max: float
    clipped_frac: float
    mismatch_kl: float


def importance_weights(
    old_logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: ISMode,
    clip_max: float,
    clip_min: float | None = None,
) -> ISResult:
    """Bounded importance weights of the trainer's old policy against the sampler.

    Args:
        old_logp: ``[B, T]`` trainer log-probabilities of the sampled tokens (no grad needed).
        sampler_logp: ``[B, T]`` the sampler's log-probabilities of the same tokens.
        mask: ``[B, T]`` 1 for trained tokens.
        mode: ``token_truncate`` clamps each token's weight to ``[clip_min, clip_max]``;
            ``token_mask`` zeroes tokens outside it; ``sequence_*`` do the same with one
            weight per sequence, ``exp(sum_t (old - sampler))`` over its masked tokens.
        clip_min: lower bound (``None``: no lower bound when truncating, 0 when masking).
        clip_max: upper bound.

    Returns:
        An :class:`ISResult` with detached weights.
    """
    if mode not in _MODES:
        raise ValueError(
            f"unknown IS mode {mode!r}; use token_truncate, token_mask, sequence_truncate "
            "or sequence_mask"
        )
    m = mask.to(torch.bool)  # [B, T]
    log_diff = (old_logp.detach() - sampler_logp.detach()).float()  # [B, T]
    log_diff = torch.where(m, log_diff, torch.zeros_like(log_diff))
    lo = clip_min if clip_min is not None else 0.0
    if mode.startswith("token"):
        raw = torch.exp(log_diff)  # [B, T]
    else:
        raw = torch.exp(log_diff.sum(-1, keepdim=True)).expand_as(log_diff)  # [B, T]
    outside = (raw > clip_max) | (raw < lo)  # [B, T]
    if mode.endswith("truncate"):
        weights = raw.clamp(min=clip_min, max=clip_max)
    else:
        weights = torch.where(outside, torch.zeros_like(raw), raw)
    weights = torch.where(m, weights, torch.zeros_like(weights))
    n = int(m.sum().item())
    if n == 0:
        return ISResult(weights, 1.0, 1.0, 1.0, 0.0, 0.0)
    raw_sel = raw[m]  # [N]
    neg = -log_diff[m]  # [N] sampler - old
    return ISResult(
        weights=weights.to(old_logp.dtype),
        ratio_mean=float(raw_sel.mean()),
        ratio_min=float(raw_sel.min()),
        ratio_max=float(raw_sel.max()),
        clipped_frac=float(outside[m].float().mean()),
        mismatch_kl=float((torch.exp(neg) - neg - 1.0).mean()),
    )
