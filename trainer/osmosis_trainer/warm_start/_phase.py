"""The warm-start phase: supervised steps on rendered demonstrations, into the RL adapter.

Loss: the mean negative log-likelihood over the step's masked (assistant) tokens; token
accuracy: the share of those tokens the model's argmax predicts. The forward pass is the
trainer's (:func:`~osmosis_trainer.loop._policy.masked_logits`, LM head only on trained
positions), micro-batched by padded tokens like an RL update, with gradient accumulation so the
accumulated gradient is the whole step's. The phase has its own AdamW (``[warm_start] lr``);
RL then starts with its own optimizer from the adapter this phase leaves.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from osmosis_trainer.loop._batch import TrainSequence
from osmosis_trainer.loop._optim import build_optimizer
from osmosis_trainer.loop._policy import lora_parameters, masked_logits
from osmosis_trainer.loop._prefix import micro_batches
from osmosis_trainer.loop._update import NonFiniteLossError, _clip_and_check, _has_dropout
from osmosis_trainer.warm_start._render import RenderedDemo

if TYPE_CHECKING:
    from osmosis_ai.config import WarmStartConfig
    from osmosis_trainer.loop._settings import LoopSettings

__all__ = ["WarmStartSettings", "WarmStartStep", "plan_warm_steps", "train_warm_start"]

logger = logging.getLogger("osmosis")


@dataclass(frozen=True)
class WarmStartSettings:
    """The phase's resolved settings (``[warm_start]`` with the trainer's defaults filled in)."""

    epochs: int
    lr: float
    batch_size: int
    micro_batch_tokens: int
    pad_id: int
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    seed: int = 0
    share_prefix: bool = True
    """Run the head the step's demonstrations share (system prompt, tools block) once per
    micro-batch (``[algorithm] share_prompt_prefix``, as RL does)."""


@dataclass
class WarmStartStep:
    """One optimiser step of the phase, as reported to metrics and the progress view."""

    step: int
    total_steps: int
    epoch: int
    loss: float
    token_accuracy: float
    tokens: int
    lr: float
    grad_norm: float
    sequences: int
    time_s: float
    extra: dict[str, float] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """The ``warm_start`` metrics record (names shared with the dashboard and trackers)."""
        return {
            "warm_start/loss": self.loss,
            "warm_start/token_accuracy": self.token_accuracy,
            "warm_start/tokens": float(self.tokens),
            "warm_start/epoch": float(self.epoch),
            "warm_start/lr": self.lr,
            "warm_start/grad_norm": self.grad_norm,
            "warm_start/sequences": float(self.sequences),
            "warm_start/step_time_s": self.time_s,
            **self.extra,
        }


def plan_warm_steps(n_demos: int, batch_size: int, epochs: int) -> int:
    """Optimiser steps of the phase: ``epochs × ceil(n_demos / batch_size)``."""
    return epochs * math.ceil(n_demos / batch_size) if n_demos else 0


def _batches(
    demos: Sequence[RenderedDemo], settings: WarmStartSettings
) -> list[tuple[int, list[RenderedDemo]]]:
    """(epoch, demonstrations) of every step, in a seeded order that changes per epoch."""
    out: list[tuple[int, list[RenderedDemo]]] = []
    for epoch in range(settings.epochs):
        order = list(range(len(demos)))
        random.Random(settings.seed * 1_000_003 + epoch).shuffle(order)
        for i in range(0, len(order), settings.batch_size):
            out.append((epoch, [demos[j] for j in order[i : i + settings.batch_size]]))
    return out


def _sequences(demos: Sequence[RenderedDemo]) -> list[TrainSequence]:
    # One group: the step's demonstrations usually share a head (system prompt, tools block),
    # which the shared-prefix packing then runs once (group_id marks who may share it).
    return [
        TrainSequence(
            token_ids=s.token_ids,
            loss_mask=s.loss_mask,
            sampler_logprobs=[0.0] * len(s.token_ids),
            rollout_id=f"warm-{d.line}",
        )
        for d in demos
        for s in d.sequences
    ]


def warm_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    seqs: Sequence[TrainSequence],
    settings: WarmStartSettings,
    *,
    device: torch.device | str = "cpu",
    where: str = "warm start",
) -> tuple[float, float, int, float]:
    """One supervised step over ``seqs``: (mean NLL, token accuracy, tokens, grad norm).

    Raises:
        NonFiniteLossError: the loss or gradient is not finite (parameters untouched).
    """
    batches = micro_batches(
        seqs,
        token_budget=settings.micro_batch_tokens,
        pad_id=settings.pad_id,
        share_prefix=settings.share_prefix,
        device=device,
    )
    total = sum(mb.n_tokens for mb in batches)
    if total == 0:
        return math.nan, math.nan, 0, 0.0
    params = [p for _, p in lora_parameters(model)]
    dropout = _has_dropout(model)
    if dropout:
        model.train()
    nll_sum = 0.0
    hits = 0
    try:
        for i, mb in enumerate(batches):
            logits, targets = masked_logits(
                model, mb.input_ids, mb.mask, prefix=mb.prefix
            )  # [N, V], [N]
            nll = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
            if not torch.isfinite(nll):
                raise NonFiniteLossError(
                    f"{where}: the loss is {nll.item()} (micro-batch {i + 1}/{len(batches)}); "
                    "the update was not applied. Lower [warm_start] lr."
                )
            torch.autograd.backward(nll / total)  # the step's token mean, accumulated
            nll_sum += float(nll.item())
            hits += int((logits.detach().argmax(-1) == targets).sum().item())
        grad_norm = _clip_and_check(params, settings.max_grad_norm, where)
        optimizer.step()
    finally:
        optimizer.zero_grad(set_to_none=True)
        if dropout:
            model.eval()
    return nll_sum / total, hits / total, total, grad_norm


def train_warm_start(
    model: torch.nn.Module,
    demos: Sequence[RenderedDemo],
    settings: WarmStartSettings,
    *,
    device: torch.device | str = "cpu",
    on_step: Callable[[WarmStartStep], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[WarmStartStep]:
    """Train ``model``'s LoRA adapter on ``demos`` for ``settings.epochs`` epochs.

    Blocking (run it in a worker thread from async code). Returns the steps done (fewer than
    planned when ``should_stop`` said so).
    """
    optimizer = build_optimizer(model, lr=settings.lr, weight_decay=settings.weight_decay)
    plan = _batches(demos, settings)
    done: list[WarmStartStep] = []
    for n, (epoch, batch) in enumerate(plan, 1):
        if should_stop is not None and should_stop():
            break
        t0 = time.perf_counter()
        seqs = _sequences(batch)
        loss, acc, tokens, grad_norm = warm_update(
            model, optimizer, seqs, settings, device=device, where=f"warm start step {n}"
        )
        step = WarmStartStep(
            step=n,
            total_steps=len(plan),
            epoch=epoch + 1,
            loss=loss,
            token_accuracy=acc,
            tokens=tokens,
            lr=settings.lr,
            grad_norm=grad_norm,
            sequences=len(seqs),
            time_s=time.perf_counter() - t0,
        )
        done.append(step)
        if on_step is not None:
            on_step(step)
    return done


def resolve_warm_settings(ws: WarmStartConfig, loop: LoopSettings, seed: int) -> WarmStartSettings:
    """``[warm_start]`` with the loop's resolved micro-batch budget, pad id and weight decay
    as defaults."""
    return WarmStartSettings(
        epochs=ws.epochs,
        lr=ws.lr,
        batch_size=ws.batch_size,
        micro_batch_tokens=ws.micro_batch_tokens or loop.micro_batch_tokens,
        pad_id=loop.pad_id,
        weight_decay=ws.weight_decay
        if ws.weight_decay is not None
        else loop.algorithm.weight_decay,
        max_grad_norm=ws.max_grad_norm,
        seed=seed,
        share_prefix=loop.algorithm.share_prompt_prefix,
    )
