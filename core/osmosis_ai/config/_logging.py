"""``[logging]`` of a training config: where metrics go and how many trajectories are kept."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from osmosis_ai.config._base import Section

__all__ = ["LoggingConfig", "Tracker"]

Tracker = Literal["tensorboard", "wandb", "mlflow"]


class LoggingConfig(Section):
    """``[logging]``: experiment trackers and the dashboard's per-step trajectory sample."""

    report_to: list[Tracker] = Field(default_factory=lambda: list[Tracker](["tensorboard"]))
    """Trackers that receive every step's metrics (the names of ``metrics.jsonl``, as TRL's
    ``report_to``): ``"tensorboard"`` (``<run>/tensorboard``), ``"wandb"`` (needs the
    ``wandb`` extra; ``WANDB_MODE=offline`` works without an account) and ``"mlflow"`` (the
    ``mlflow`` extra; ``MLFLOW_TRACKING_URI``, default a file store in ``<run>/mlruns``).
    ``[]`` keeps only ``metrics.jsonl``."""
    project: str | None = None
    """The W&B project / MLflow experiment name (default: the run's name)."""
    trace_samples_per_step: int = Field(default=4, ge=0, le=256)
    """Trajectories per step kept in ``<run>/traces/step_NNNNNN.jsonl`` for ``osmosis
    dashboard`` (whole groups first: their rewards and advantages side by side), with the
    conversation, the token ids, the trained mask and the sampler's and trainer's logprobs.
    The trainer's logprobs come from the update's own first forward pass (no extra cost); a
    trajectory whose group trained nothing (all rewards equal) has none. 0 keeps none."""
    trace_max_tokens: int = Field(default=4096, ge=16, le=65536)
    """Sequences longer than this are cut to it in the trace (marked ``cut``)."""

    @field_validator("report_to")
    @classmethod
    def _unique(cls, value: list[Tracker]) -> list[Tracker]:
        if len(set(value)) != len(value):
            raise ValueError(f"report_to lists a tracker twice: {value}")
        return value
