"""The loop's settings: the training config's own sections, resolved for one run in one place.

The pydantic sections of :mod:`osmosis_ai.config` are the only description of every training
setting and its default. :func:`resolve_settings` is the only place that turns them into the
few values that depend on the run itself (its length, the device, the tokenizer); the loop and
the update read everything else from the sections directly. The TOML path
(``run_training``) and the Python API (sections built in code) therefore train the same
algorithm with the same defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from osmosis_ai.config import (
    AlgorithmConfig,
    CheckpointsConfig,
    EvaluationConfig,
    SamplingConfig,
    TrainingConfig,
    TrainingSection,
)
from osmosis_trainer.loop._data import plan_steps

__all__ = ["LoopSettings", "resolve_settings"]

# Padded tokens per forward/backward pass when [algorithm] micro_batch_tokens is unset. The
# activations kept for backward grow with it (about 2 MB per token for SmolLM2-135M's 30 layers
# in fp32, half that in bf16) and dominate the update's peak memory on CPU. fp32 base weights
# take twice the memory of bf16 ones, so fp32 takes half the budget to keep the peak under the
# memory goal (0.40x TRL's defaults); the trainer_real benchmark's micro-batch rows show what
# each budget costs in step time and memory.
_DEFAULT_MICRO_BATCH_TOKENS = {("cpu", "float32"): 256, ("cpu", "bfloat16"): 512}
_CUDA_MICRO_BATCH_TOKENS = 8192


@dataclass(frozen=True)
class LoopSettings:
    """A training config's sections plus the values they resolve to for one run.

    Build it with :func:`resolve_settings` (the resolved fields have no defaults of their
    own: every default lives on the sections).
    """

    training: TrainingSection
    algorithm: AlgorithmConfig
    sampling: SamplingConfig
    checkpoints: CheckpointsConfig
    evaluation: EvaluationConfig
    total_steps: int
    """Optimiser steps of the run: epochs x batches per epoch, capped by ``max_steps``."""
    micro_batch_tokens: int
    """``[algorithm] micro_batch_tokens``, or the default for the device and dtype when unset."""
    max_completion_length: int
    """Most tokens one policy call generates: ``[sampling] max_tokens``, else
    ``[training] max_response_length`` (also the ``dr_grpo`` normaliser)."""
    temperature: float
    """The temperature the trainer's logprobs are computed at: the sampler's, or 1.0 for
    greedy sampling (temperature 0)."""
    pad_id: int
    """The tokenizer's padding token id."""


def resolve_settings(
    config: TrainingConfig | None = None,
    *,
    n_rows: int,
    pad_id: int,
    device: str = "cpu",
    dtype: str = "float32",
    training: TrainingSection | None = None,
    algorithm: AlgorithmConfig | None = None,
    sampling: SamplingConfig | None = None,
    checkpoints: CheckpointsConfig | None = None,
    evaluation: EvaluationConfig | None = None,
) -> LoopSettings:
    """Resolve a training config (or sections built in code) for a run over ``n_rows`` rows.

    Pass either a loaded ``config`` or the sections themselves; a section left out takes the
    section's defaults (the same as an absent TOML section). ``dtype`` is the base weights'
    resolved dtype (``models.training_dtype``).
    """
    if config is not None:
        given = (training, algorithm, sampling, checkpoints, evaluation)
        if any(s is not None for s in given):
            raise TypeError("pass either a TrainingConfig or sections, not both")
        training, algorithm, sampling = config.training, config.algorithm, config.sampling
        checkpoints, evaluation = config.checkpoints, config.evaluation
    t = training or TrainingSection()
    a = algorithm or AlgorithmConfig()
    s = sampling or SamplingConfig()
    default_micro = (
        _CUDA_MICRO_BATCH_TOKENS
        if device.startswith("cuda")
        else _DEFAULT_MICRO_BATCH_TOKENS.get(("cpu", dtype), 512)
    )
    return LoopSettings(
        training=t,
        algorithm=a,
        sampling=s,
        checkpoints=checkpoints or CheckpointsConfig(),
        evaluation=evaluation or EvaluationConfig(),
        total_steps=plan_steps(n_rows, t.rollout_batch_size, t.total_epochs, t.max_steps),
        micro_batch_tokens=a.micro_batch_tokens or default_micro,
        max_completion_length=s.max_tokens or t.max_response_length,
        temperature=s.rollout_temperature or 1.0,
        pad_id=pad_id,
    )
