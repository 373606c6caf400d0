"""``[lora]`` and ``[algorithm]``: the LoRA adapter and the GRPO objective.

After the first version, the trainer team owns this file and adds fields here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from osmosis_ai.config._base import Section

__all__ = [
    "AlgorithmConfig",
    "ImportanceCorrection",
    "LRSchedule",
    "LoRAConfig",
    "LossType",
    "ScaleRewards",
]

ImportanceCorrection = Literal[
    "token_truncate", "token_mask", "sequence_truncate", "sequence_mask", "none"
]
LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
ScaleRewards = Literal["group", "batch", "none"]
LRSchedule = Literal["constant", "linear", "cosine"]


class LoRAConfig(Section):
    """``[lora]``: the LoRA adapter trained on top of the frozen base model (peft)."""

    r: int = Field(default=8, ge=1)
    """Rank of the low-rank update matrices."""
    alpha: int = Field(default=16, ge=1)
    """Scaling numerator: the update is scaled by ``alpha / r``."""
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Dropout on the LoRA input during training."""
    target_modules: str | list[str] = "all-linear"
    """Modules that get adapters: ``"all-linear"`` or a list of module names (``q_proj``...)."""


class AlgorithmConfig(Section):
    """``[algorithm]``: how rewards become a policy-gradient loss."""

    loss_type: LossType = "dapo"
    """Loss aggregation: ``grpo`` (mean per sequence, then over sequences; length-biased),
    ``bnpo`` (mean over the tokens of each micro-batch), ``dr_grpo`` (sum over tokens divided by
    sequences x ``max_response_length``), ``dapo`` (mean over all tokens of the step)."""
    scale_rewards: ScaleRewards = "group"
    """Divide advantages by the reward std of the ``group`` (GRPO), of the whole ``batch``, or
    not at all (``none``, as in Dr. GRPO)."""
    epsilon: float = Field(default=0.2, gt=0.0)
    """Lower clip range of the policy ratio (ratio >= 1 - epsilon)."""
    epsilon_high: float = Field(default=0.28, gt=0.0)
    """Upper clip range (ratio <= 1 + epsilon_high); DAPO's clip-higher."""
    beta: float = Field(default=0.0, ge=0.0)
    """KL penalty coefficient against the base model (0 disables it and the reference pass)."""
    is_correction: ImportanceCorrection = "token_truncate"
    """Importance-sampling correction for the gap between the sampler's and the trainer's
    logprobs: truncate (clip weights at ``is_clip_max``) or mask (drop tokens/sequences whose
    weight is outside ``[is_clip_min, is_clip_max]``), per token or per sequence; or none."""
    is_clip_max: float = Field(default=3.0, gt=0.0)
    """Upper bound of the importance weight."""
    is_clip_min: float | None = Field(default=None, ge=0.0)
    """Lower bound of the importance weight for the masking modes (``None``: no lower bound)."""
    max_failure_rate: float = Field(default=0.5, ge=0.0, le=1.0)
    """Stop the run when more than this fraction of a step's rollouts fail."""
    micro_batch_tokens: int | None = Field(default=None, ge=1)
    """Split each optimiser step into micro-batches of at most this many padded tokens, with
    gradient accumulation (``None``: on CPU 1024 with bf16 base weights and 512 with fp32,
    8192 on GPU). Peak memory grows with it; lower it when training runs out of memory."""
    delta: float | None = Field(default=None, gt=1.0)
    """Optional extra upper bound on the unclipped policy ratio (INTELLECT-2's two-sided
    clip); ``None`` disables it."""
    num_iterations: int = Field(default=1, ge=1)
    """Optimiser steps per batch of rollouts (PPO epochs). With 1 the batch is on-policy and
    the old logprobs come from the same forward pass."""
    max_grad_norm: float | None = Field(default=1.0, gt=0.0)
    """Clip the gradient norm of the LoRA parameters to this (``None``: no clipping)."""
    weight_decay: float = Field(default=0.0, ge=0.0)
    """AdamW weight decay of the LoRA parameters."""
    skip_zero_variance_groups: bool = True
    """Leave groups whose rewards are all equal out of the update (they carry no signal and
    would only dilute the token mean); they are still counted in ``zero_variance_groups``."""
    mask_truncated_completions: bool = False
    """Leave samples whose completion hit ``max_response_length`` out of the update."""
    rollouts_ahead: Literal[0, 1] = 0
    """1: collect the next step's rollouts while the current update trains (generation and
    training overlap; the data is one policy version old, corrected by ``is_correction``).
    0: strictly on-policy, one phase after the other."""
    share_prompt_prefix: bool = True
    """Run the prompt a group's samples share once per micro-batch in the training forward
    pass (used when the shared prefix is at least 8 tokens; short groups go packed end to end
    without padding); the warm start does the same for the head its demonstrations share
    (system prompt, tools)."""
    warmup_steps: int = Field(default=0, ge=0)
    """Linear learning-rate warm-up steps."""
    lr_schedule: LRSchedule = "constant"
    """Learning-rate schedule after warm-up."""

    @model_validator(mode="after")
    def _clip_order(self) -> AlgorithmConfig:
        if self.is_clip_min is not None and self.is_clip_min >= self.is_clip_max:
            raise ValueError(
                f"is_clip_min ({self.is_clip_min}) must be below is_clip_max ({self.is_clip_max})"
            )
        return self
