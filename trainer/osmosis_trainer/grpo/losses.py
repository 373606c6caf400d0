"""The clipped GRPO policy loss, its aggregation modes, k3 KL and entropy.

Shapes: ``B`` sequences in a micro-batch, ``T`` token positions (already shifted so position
``t`` holds the log-probability of the token at ``t + 1``), ``N`` selected tokens, ``V`` vocab.
Every function is pure; the loop feeds them tensors and sums the micro-batch losses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from osmosis_ai.config import LossType

__all__ = [
    "LossNormalizers",
    "LossType",
    "aggregate_token_loss",
    "clipped_token_loss",
    "entropy_from_logits",
    "entropy_from_logprobs",
    "k3_kl",
    "masked_mean",
]

def clipped_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    delta: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO/GRPO surrogate ``-min(ratio·A, clamp(ratio, 1-eps_low, 1+eps_high)·A)``.

    Args:
        logp: ``[B, T]`` log-probabilities under the current policy (with grad).
        old_logp: ``[B, T]`` log-probabilities of the policy that produced the data (no grad).
        advantages: ``[B]`` one advantage per sequence (or ``[B, T]`` per token).
        eps_low: lower clip range (ratio ≥ 1 - eps_low).
        eps_high: upper clip range (ratio ≤ 1 + eps_high); DAPO raises it to 0.28.
        delta: optional extra upper bound on the unclipped ratio (INTELLECT-2 two-sided clip).

    Returns:
        ``(loss [B, T], clipped [B, T] bool)``; ``clipped`` marks tokens where the clipped term
        was the one taken (they get no gradient).
    """
    adv = advantages.unsqueeze(-1) if advantages.ndim == 1 else advantages  # [B, 1] | [B, T]
    ratio = torch.exp(logp - old_logp)  # [B, T]
    clipped_ratio = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)  # [B, T]
    unclipped_ratio = torch.clamp(ratio, max=delta) if delta is not None else ratio
    term1 = unclipped_ratio * adv  # [B, T]
    term2 = clipped_ratio * adv  # [B, T]
    loss = -torch.minimum(term1, term2)  # [B, T]
    clipped = (term2 < term1).detach()  # [B, T]
    return loss, clipped


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(policy || reference) per token: ``exp(ref-logp) - (ref-logp) - 1``.

    Args:
        logp: ``[B, T]`` policy log-probabilities (with grad).
        ref_logp: ``[B, T]`` reference log-probabilities (the base model, adapter off).

    Returns:
        ``[B, T]`` non-negative per-token KL estimates.
    """
    diff = ref_logp - logp  # [B, T]
    return torch.exp(diff) - diff - 1.0


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the last dim: ``[..., V] -> [...]``."""
    return entropy_from_logprobs(torch.log_softmax(logits.float(), dim=-1))


def entropy_from_logprobs(logp: torch.Tensor) -> torch.Tensor:
    """Entropy of a distribution given as log-probabilities over the last dim."""
    return -(logp.exp() * logp).sum(-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1 (0 when the mask is empty). Shapes broadcast."""
    m = mask.to(values.dtype)
    return (values * m).sum() / m.sum().clamp(min=1.0)


@dataclass(frozen=True)
class LossNormalizers:
    """Batch-wide totals the aggregation divides by, so micro-batch losses sum to the full loss.

    Attributes:
        total_tokens: weighted active tokens of the whole step batch, ``sum_i w_i · n_i``.
        total_sequences: weighted sequences of the whole step batch, ``sum_i w_i``.
        max_completion_length: the configured max response length (``dr_grpo``).
        num_micro_batches: how many micro-batches the step batch was split into (``bnpo``).
    """

    total_tokens: float
    total_sequences: float
    max_completion_length: int
    num_micro_batches: int = 1


def aggregate_token_loss(
    token_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_type: LossType,
    norm: LossNormalizers,
    *,
    seq_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce per-token losses of one micro-batch to a scalar contribution.

    Summing the returned value over all micro-batches of a step gives the step loss:

    - ``grpo``: mean over sequences of (sum / own length) — length-biased.
    - ``bnpo``: sum / active tokens of this micro-batch, averaged over micro-batches.
    - ``dr_grpo``: sum / (sequences × max_completion_length).
    - ``dapo``: sum / active tokens of the whole step batch.

    Args:
        token_loss: ``[B, T]`` per-token losses.
        mask: ``[B, T]`` 1 for trained tokens.
        loss_type: one of the four modes above.
        norm: batch-wide totals (see :class:`LossNormalizers`).
        seq_weights: ``[B]`` optional per-sequence weights (a rollout split into k sequences
            gives each ``1/k`` so every rollout counts once); the same weights must be used
            to compute ``norm``.

    Returns:
        A scalar tensor.
    """
    m = mask.to(token_loss.dtype)  # [B, T]
    w = (
        seq_weights.to(token_loss.dtype)
        if seq_weights is not None
        else torch.ones(token_loss.shape[0], dtype=token_loss.dtype, device=token_loss.device)
    )  # [B]
    per_seq_sum = (token_loss * m).sum(-1)  # [B]
    if loss_type == "grpo":
        per_seq_mean = per_seq_sum / m.sum(-1).clamp(min=1.0)  # [B]
        return (w * per_seq_mean).sum() / max(norm.total_sequences, 1e-8)
    if loss_type == "bnpo":
        local_tokens = (w * m.sum(-1)).sum().clamp(min=1.0)
        return (w * per_seq_sum).sum() / local_tokens / max(norm.num_micro_batches, 1)
    if loss_type == "dr_grpo":
        denom = max(norm.total_sequences * norm.max_completion_length, 1e-8)
        return (w * per_seq_sum).sum() / denom
    if loss_type == "dapo":
        return (w * per_seq_sum).sum() / max(norm.total_tokens, 1e-8)
    raise ValueError(f"unknown loss_type {loss_type!r}; use grpo, bnpo, dr_grpo or dapo")
