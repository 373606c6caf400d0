"""AdamW over the LoRA parameters and a warmup + decay learning-rate schedule."""

from __future__ import annotations

import math

import torch

from osmosis_ai.config import LRSchedule
from osmosis_trainer.loop._policy import lora_parameters

__all__ = [
    "LRSchedule",
    "WarmupDecaySchedule",
    "build_optimizer",
    "build_scheduler",
    "lr_factor",
]

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


def lr_factor(step: int, *, warmup_steps: int, total_steps: int, schedule: LRSchedule) -> float:
    """Multiplier of the base learning rate before optimizer step ``step`` (0-based).

    Linear warmup from ``1/(warmup+1)`` up to 1 over ``warmup_steps`` steps, then constant,
    linear decay to 0, or cosine decay to 0 at ``total_steps``.
    """
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if schedule == "constant":
        return 1.0
    span = max(total_steps - warmup_steps, 1)
    progress = min(max((step - warmup_steps) / span, 0.0), 1.0)
    if schedule == "linear":
        return 1.0 - progress
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown lr schedule {schedule!r}; use constant, linear or cosine")


class WarmupDecaySchedule:
    """Sets the optimizer's learning rate from :func:`lr_factor` of the training step.

    Unlike torch's schedulers it may be stepped on steps where the optimizer did not step
    (all groups had zero variance), keeping the schedule tied to training steps.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        warmup_steps: int,
        total_steps: int,
        schedule: LRSchedule,
    ) -> None:
        lr_factor(0, warmup_steps=warmup_steps, total_steps=total_steps, schedule=schedule)
        self.optimizer = optimizer
        self.base_lrs = [float(g["lr"]) for g in optimizer.param_groups]
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.schedule: LRSchedule = schedule
        self.step_count = 0
        self._apply()

    def _apply(self) -> None:
        factor = lr_factor(
            self.step_count,
            warmup_steps=self.warmup_steps,
            total_steps=self.total_steps,
            schedule=self.schedule,
        )
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * factor

    def get_last_lr(self) -> list[float]:
        return [float(g["lr"]) for g in self.optimizer.param_groups]

    def step(self) -> None:
        self.step_count += 1
        self._apply()

    def state_dict(self) -> dict[str, object]:
        return {"step_count": self.step_count, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.step_count = int(state["step_count"])  # type: ignore[call-overload]
        self.base_lrs = [float(x) for x in state["base_lrs"]]  # type: ignore[attr-defined]
        self._apply()


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int,
    schedule: LRSchedule,
) -> WarmupDecaySchedule:
    """The learning-rate schedule, stepped once per training step."""
    return WarmupDecaySchedule(
        optimizer, warmup_steps=warmup_steps, total_steps=total_steps, schedule=schedule
    )
