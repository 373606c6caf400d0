"""A whole training job from a training config: :func:`plan_job` sizes and checks it (no model
loaded), :func:`run_training` runs it (model, engine, gateway, rollouts, warm start, the
:class:`~osmosis_trainer.loop.Trainer`, a Ray cluster with ``[cluster]``).

This room sits above ``loop``, ``warm_start``, ``distributed`` and ``server_workflow``: it wires
them together, and none of them imports it.
"""

from __future__ import annotations

from osmosis_trainer.job._engines import VLLMOptions, vllm_options
from osmosis_trainer.job._plan import JobPlan, needs_entrypoint, plan_job, resolve_device
from osmosis_trainer.job._run import run_training

__all__ = [
    "JobPlan",
    "VLLMOptions",
    "needs_entrypoint",
    "plan_job",
    "resolve_device",
    "run_training",
    "vllm_options",
]
