"""One policy update: micro-batches, loss, gradient accumulation, optimizer step."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import torch

from osmosis_ai.errors import TrainingError
from osmosis_trainer.grpo import (
    ISMode,
    LossNormalizers,
    aggregate_token_loss,
    clipped_token_loss,
    importance_weights,
    k3_kl,
    require_nonempty,
)
from osmosis_trainer.loop._batch import MicroBatch, TrainSequence
from osmosis_trainer.loop._policy import adapter_disabled, lora_parameters, token_logprobs
from osmosis_trainer.loop._prefix import micro_batches
from osmosis_trainer.loop._settings import LoopSettings

__all__ = ["NonFiniteLossError", "UpdateStats", "policy_update"]


class NonFiniteLossError(TrainingError):
    """The loss or the gradient became NaN/inf; the update was not applied."""


def _is_mode(settings: LoopSettings) -> ISMode | None:
    mode = settings.algorithm.is_correction
    return None if mode == "none" else mode


@dataclass
class UpdateStats:
    """What one update measured (masked token means unless noted)."""

    loss: float = 0.0
    clip_frac: float = 0.0
    entropy: float = 0.0
    kl: float = 0.0
    grad_norm: float = 0.0
    is_ratio_mean: float = 1.0
    is_ratio_min: float = 1.0
    is_ratio_max: float = 1.0
    is_clipped_frac: float = 0.0
    mismatch_kl: float = 0.0
    tokens: int = 0
    sequences: int = 0
    micro_batches: int = 0
    logprobs: dict[int, list[float | None]] = field(default_factory=dict, repr=False)
    """Per sequence asked for (``policy_update(keep=...)``), the logprob the policy gave each
    trained token before the update (``None`` elsewhere), aligned with its ``token_ids``."""
    _sums: dict[str, float] = field(default_factory=dict, repr=False)

    def as_metrics(self) -> dict[str, float]:
        return {
            "loss": self.loss,
            "clip_frac": self.clip_frac,
            "entropy": self.entropy,
            "kl": self.kl,
            "grad_norm": self.grad_norm,
            "is_ratio_mean": self.is_ratio_mean,
            "is_ratio_min": self.is_ratio_min,
            "is_ratio_max": self.is_ratio_max,
            "is_clipped_frac": self.is_clipped_frac,
            "mismatch_kl": self.mismatch_kl,
            "train_tokens": float(self.tokens),
            "train_sequences": float(self.sequences),
            "micro_batches": float(self.micro_batches),
        }


def _masked_sum(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values.detach().float() * mask).sum().item())


def _micro_batch_loss(
    model: torch.nn.Module,
    mb: MicroBatch,
    settings: LoopSettings,
    norm: LossNormalizers,
    old_logp: torch.Tensor | None,
    acc: dict[str, float],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward one micro-batch: its share of the step loss (with grad), and the logprobs the
    loss took as the old policy's (``[B, T-1]``, detached)."""
    a = settings.algorithm
    logp, entropy = token_logprobs(
        model, mb.input_ids, mb.mask, temperature=settings.temperature, with_entropy=True,
        prefix=mb.prefix,
    )  # [B, T-1] each
    old = logp.detach() if old_logp is None else old_logp  # [B, T-1]
    mask_f = mb.mask.float()  # [B, T-1]
    token_loss, clipped = clipped_token_loss(
        logp, old, mb.advantages, eps_low=a.epsilon, eps_high=a.epsilon_high, delta=a.delta,
    )  # [B, T-1]
    is_mode = _is_mode(settings)
    if is_mode is not None:
        isr = importance_weights(
            old, mb.sampler_logp, mb.mask, mode=is_mode,
            clip_min=a.is_clip_min, clip_max=a.is_clip_max,
        )
        token_loss = token_loss * isr.weights  # [B, T-1]
        n = float(mb.n_tokens)
        acc["is_ratio_mean"] += isr.ratio_mean * n
        acc["is_clipped_frac"] += isr.clipped_frac * n
        acc["mismatch_kl"] += isr.mismatch_kl * n
        acc["is_ratio_min"] = min(acc["is_ratio_min"], isr.ratio_min)
        acc["is_ratio_max"] = max(acc["is_ratio_max"], isr.ratio_max)
    if a.beta > 0.0:
        with torch.no_grad(), adapter_disabled(model):
            ref_logp, _ = token_logprobs(
                model, mb.input_ids, mb.mask, temperature=settings.temperature,
                prefix=mb.prefix,
            )
        kl = k3_kl(logp, ref_logp)  # [B, T-1]
        token_loss = token_loss + a.beta * kl
        acc["kl"] += _masked_sum(kl, mask_f)
    loss = aggregate_token_loss(
        token_loss, mb.mask, a.loss_type, norm, seq_weights=mb.weights
    )
    acc["clip"] += _masked_sum(clipped.float(), mask_f)
    if entropy is not None:
        acc["entropy"] += _masked_sum(entropy, mask_f)
    return loss, old


def _old_logprobs(
    model: torch.nn.Module, batches: list[MicroBatch], settings: LoopSettings
) -> list[torch.Tensor]:
    with torch.no_grad():
        return [
            token_logprobs(
                model, mb.input_ids, mb.mask, temperature=settings.temperature,
                prefix=mb.prefix,
            )[0]
            for mb in batches
        ]


def policy_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    seqs: Sequence[TrainSequence],
    settings: LoopSettings,
    *,
    device: torch.device | str = "cpu",
    where: str = "update",
    keep: Collection[int] = (),
) -> UpdateStats:
    """Run ``[algorithm] num_iterations`` optimizer steps over ``seqs``.

    Micro-batches are packed by ``settings.micro_batch_tokens``; their losses are normalised
    by batch-wide totals so the accumulated gradient equals the full-batch gradient. For the
    sequences whose indices are in ``keep`` (the traced ones), :attr:`UpdateStats.logprobs`
    holds the pre-update logprobs the first iteration computed anyway, so the traces need no
    forward pass of their own.

    Raises:
        TrainingError: the batch trains no token at all.
        NonFiniteLossError: the loss or gradient norm is not finite (parameters untouched).
    """
    if not seqs:
        raise TrainingError(f"{where}: no sequences to train on")
    batches = micro_batches(
        seqs,
        token_budget=settings.micro_batch_tokens,
        pad_id=settings.pad_id,
        share_prefix=settings.algorithm.share_prompt_prefix,
        device=device,
    )
    require_nonempty(torch.stack([mb.mask.any() for mb in batches]), where)
    norm = LossNormalizers(
        total_tokens=sum(s.weight * s.n_trained for s in seqs),
        total_sequences=sum(s.weight for s in seqs),
        max_completion_length=settings.max_completion_length,
        num_micro_batches=len(batches),
    )
    params = [p for _, p in lora_parameters(model)]
    iterations = settings.algorithm.num_iterations
    old_cache = _old_logprobs(model, batches, settings) if iterations > 1 else None
    dropout = _has_dropout(model)
    if dropout:
        model.train()
    acc = {
        "loss": 0.0, "clip": 0.0, "entropy": 0.0, "kl": 0.0, "is_ratio_mean": 0.0,
        "is_clipped_frac": 0.0, "mismatch_kl": 0.0, "is_ratio_min": math.inf,
        "is_ratio_max": -math.inf,
    }
    grad_norm = 0.0
    kept: dict[int, list[float | None]] = {}
    try:
        for iteration in range(iterations):
            step_loss = 0.0
            for i, mb in enumerate(batches):
                old = old_cache[i] if old_cache is not None else None
                loss, before = _micro_batch_loss(model, mb, settings, norm, old, acc)
                if iteration == 0 and keep:
                    kept.update(_row_logprobs(mb, before, seqs, keep))
                if not torch.isfinite(loss):
                    raise NonFiniteLossError(
                        f"{where}: the loss is {loss.item()} (micro-batch {i + 1}/"
                        f"{len(batches)}); the update was not applied. Lower the learning "
                        "rate or check the rewards for extreme values."
                    )
                torch.autograd.backward(loss)
                step_loss += float(loss.item())
            grad_norm = _clip_and_check(params, settings.algorithm.max_grad_norm, where)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            acc["loss"] = step_loss
    except BaseException:
        optimizer.zero_grad(set_to_none=True)
        raise
    finally:
        if dropout:
            model.eval()
    stats = _finish_stats(acc, batches, grad_norm, len(seqs), settings)
    stats.logprobs = kept
    return stats


def _row_logprobs(
    mb: MicroBatch, logp: torch.Tensor, seqs: Sequence[TrainSequence], keep: Collection[int]
) -> dict[int, list[float | None]]:
    """The kept rows' logprobs, each placed at the index of the token it scores."""
    out: dict[int, list[float | None]] = {}
    values = logp.float().cpu()  # [B, T-1] or [B, S]
    mask = mb.mask.cpu()
    for r, (seq, start) in enumerate(zip(mb.rows, mb.starts, strict=True)):
        if seq not in keep:
            continue
        row: list[float | None] = [None] * len(seqs[seq].token_ids)
        for j in mask[r].nonzero().flatten().tolist():
            row[start + j] = float(values[r, j])
        out[seq] = row
    return out


_DROPOUTS = (
    torch.nn.Dropout,
    torch.nn.Dropout1d,
    torch.nn.Dropout2d,
    torch.nn.Dropout3d,
    torch.nn.AlphaDropout,
    torch.nn.FeatureAlphaDropout,
)
"""torch's public dropout layers (their private common base is ``_DropoutNd``)."""


def _has_dropout(model: torch.nn.Module) -> bool:
    """Whether train/eval mode changes what ``model`` computes (an active dropout layer); a
    model without one stays in eval mode (some attention kernels differ between the modes)."""
    return any(isinstance(m, _DROPOUTS) and m.p > 0 for m in model.modules())


def _clip_and_check(params: list[torch.nn.Parameter], max_norm: float | None, where: str) -> float:
    limit = max_norm if max_norm is not None else math.inf
    norm = torch.nn.utils.clip_grad_norm_(params, limit)
    if not torch.isfinite(norm):
        raise NonFiniteLossError(
            f"{where}: the gradient norm is {norm.item()}; the update was not applied. "
            "Lower the learning rate or set [algorithm] max_grad_norm."
        )
    return float(norm.item())


def _finish_stats(
    acc: dict[str, float],
    batches: list[MicroBatch],
    grad_norm: float,
    n_seqs: int,
    settings: LoopSettings,
) -> UpdateStats:
    tokens = sum(mb.n_tokens for mb in batches)
    per_pass = max(tokens, 1) * settings.algorithm.num_iterations
    stats = UpdateStats(
        loss=acc["loss"],
        clip_frac=acc["clip"] / per_pass,
        entropy=acc["entropy"] / per_pass,
        kl=acc["kl"] / per_pass,
        grad_norm=grad_norm,
        tokens=tokens,
        sequences=n_seqs,
        micro_batches=len(batches),
    )
    if _is_mode(settings) is not None:
        stats.is_ratio_mean = acc["is_ratio_mean"] / per_pass
        stats.is_clipped_frac = acc["is_clipped_frac"] / per_pass
        stats.mismatch_kl = acc["mismatch_kl"] / per_pass
        stats.is_ratio_min = acc["is_ratio_min"]
        stats.is_ratio_max = acc["is_ratio_max"]
    return stats
