"""``[heldout]`` of a training config: compare the trained adapter with its base model at the end."""

from __future__ import annotations

from pydantic import Field

from osmosis_ai.config._base import Section

__all__ = ["HeldOutConfig"]


class HeldOutConfig(Section):
    """``[heldout]``: after the last step, evaluate the final checkpoint and its base model on
    rows left out of training (``osmosis eval run --model RUN --baseline``), and show the paired
    difference with its 95% confidence interval on the run's end screen and in ``train info``.
    Each model runs as many rollouts at once as one training step did (the eval config's
    ``[evaluation] concurrency``, when set, instead)."""

    eval_config: str
    """The eval config that runs both models (``configs/eval/<name>.toml``: rollout, grader,
    timeouts, sampling), relative to the workspace root."""
    dataset: str | None = None
    """The held-out rows (relative to the workspace root; ``None``: the eval config's
    ``dataset``). They must not be rows the run trained on, or the comparison says nothing about
    generalisation."""
    n: int = Field(default=1, ge=1, le=64)
    """Samples per row for each model (more narrows the interval; the eval takes ``n`` times
    as long)."""
