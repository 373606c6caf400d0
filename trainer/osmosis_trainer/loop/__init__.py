"""The GRPO training loop: orchestration over :mod:`osmosis_trainer.grpo`.

What a Python-API user writes against: :func:`run_training` (a whole job from a
``TrainingConfig``; :func:`plan_job` previews it), or a :class:`Trainer` over a custom
:class:`RolloutSource` that returns :class:`StepRollouts` of :class:`GradedSample`. The
plumbing lives in modules named for what it does (``_batch``, ``_prefix``, ``_policy``,
``_optim``, ``_update``, ``_metrics``, ``_run``), imported from there.
"""

from __future__ import annotations

from osmosis_trainer.loop._job import JobPlan, plan_job, run_training
from osmosis_trainer.loop._rollouts import GradedSample, RolloutSource, SequenceData, StepRollouts
from osmosis_trainer.loop._settings import LoopSettings, resolve_settings
from osmosis_trainer.loop._source import GatewayRolloutSource
from osmosis_trainer.loop._trainer import StepReport, Trainer, TrainResult
from osmosis_trainer.loop._update import NonFiniteLossError

__all__ = [
    "GatewayRolloutSource",
    "GradedSample",
    "JobPlan",
    "LoopSettings",
    "NonFiniteLossError",
    "RolloutSource",
    "SequenceData",
    "StepReport",
    "StepRollouts",
    "TrainResult",
    "Trainer",
    "plan_job",
    "resolve_settings",
    "run_training",
]
