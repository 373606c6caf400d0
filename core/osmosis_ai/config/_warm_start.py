"""``[warm_start]`` of a training config: a supervised phase on demonstrations before RL."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from osmosis_ai.config._base import Section

__all__ = ["WarmStartConfig"]


class WarmStartConfig(Section):
    """``[warm_start]``: before step 1, train the run's LoRA adapter on demonstration
    conversations (JSONL rows of OpenAI chat messages with ``tool_calls`` and ``tool`` results,
    optional ``tools``), then let RL continue from it. Each conversation is rendered exactly as
    the engine renders prompts during RL and at deploy, and the loss covers the tokens the model
    would have generated (its assistant turns) only. The adapter it ends with is saved as the
    checkpoint ``RUN:warm``; ``[training].max_steps = 0`` runs this phase alone."""

    dataset: str
    """The demonstrations, a ``.jsonl`` file relative to the workspace root: one conversation a
    line, ``{"messages": [...], "tools": [...]}`` (``osmosis dataset from-eval`` writes them;
    ``osmosis dataset validate`` checks them)."""
    epochs: int = Field(default=2, ge=1, le=1000)
    """Passes over the demonstrations."""
    lr: float = Field(default=2e-4, gt=0.0)
    """AdamW learning rate of the phase (constant; LoRA usually wants far more than RL's)."""
    batch_size: int = Field(default=8, ge=1)
    """Conversations per optimiser step (split into micro-batches by tokens)."""
    micro_batch_tokens: int | None = Field(default=None, ge=1)
    """Most padded tokens per forward pass (``None``: ``[algorithm].micro_batch_tokens``, or
    its default for the device)."""
    max_tokens: int = Field(default=2048, ge=16)
    """Longest rendered conversation, in tokens; longer ones are skipped and counted."""
    on_bad_row: Literal["error", "skip"] = "error"
    """A malformed row (unknown role, a tool result without its call, arguments that are not
    JSON...): ``error`` stops the run before training with the row's file and line; ``skip``
    leaves it out and counts it in the phase's log."""
    weight_decay: float | None = Field(default=None, ge=0.0)
    """AdamW weight decay (``None``: ``[algorithm].weight_decay``)."""
    max_grad_norm: float | None = Field(default=1.0, gt=0.0)
    """Clip the gradient norm of the LoRA parameters to this (``None``: no clipping)."""
