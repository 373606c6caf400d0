"""AdamW over the LoRA parameters and torch's warm-up + decay learning-rate schedulers."""

from __future__ import annotations

import torch
from torch.optim.lr_scheduler import (
    ConstantLR,
    CosineAnnealingLR,
    LinearLR,
    LRScheduler,
    SequentialLR,
)

from osmosis_ai.config import LRSchedule
from osmosis_trainer.loop._policy import lora_parameters

__all__ = ["build_optimizer", "build_scheduler"]

def build_optimizer(
    model: torch.nn.Module,
    *,
    lr: float,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> torch.optim.AdamW:
    """AdamW over the trainable parameters only (the base model stays frozen)."""
    params = [p for _, p in lora_parameters(model)]
    if not params:
        raise ValueError("the model has no trainable parameters; attach a LoRA adapter first")
    # foreach=False keeps the update order (and so the floats) independent of grouping.
    return torch.optim.AdamW(
        params, lr=lr, weight_decay=weight_decay, betas=betas, eps=eps, foreach=False
    )


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int,
    schedule: LRSchedule,
) -> LRScheduler:
    """torch's schedulers, stepped once per training step (also on steps without an update).

    Linear warm-up from ``1/(warmup+1)`` of the base rate up to it over ``warmup_steps`` steps
    (the first step already trains), then constant, linear decay to 0, or cosine decay to 0
    at ``total_steps``.
    """
    span = max(total_steps - warmup_steps, 1)
    decay: LRScheduler
    if schedule == "constant":
        decay = ConstantLR(optimizer, factor=1.0, total_iters=0)
    elif schedule == "linear":
        decay = LinearLR(optimizer, start_factor=1.0, end_factor=0.0, total_iters=span)
    elif schedule == "cosine":
        decay = CosineAnnealingLR(optimizer, T_max=span, eta_min=0.0)
    else:
        raise ValueError(f"unknown lr schedule {schedule!r}; use constant, linear or cosine")
    if warmup_steps == 0:
        return decay
    warmup = LinearLR(
        optimizer, start_factor=1.0 / (warmup_steps + 1), end_factor=1.0, total_iters=warmup_steps
    )
    return SequentialLR(optimizer, [warmup, decay], milestones=[warmup_steps])
