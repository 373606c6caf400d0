"""The GRPO training loop: orchestration over :mod:`osmosis_trainer.grpo`.

What a Python-API user writes against: a :class:`Trainer` over a custom
:class:`RolloutSource` that returns :class:`StepRollouts` of :class:`GradedSample` (a whole job
from a ``TrainingConfig`` is :func:`osmosis_trainer.job.run_training`, one room up). The
plumbing lives in modules named for what it does (``_batch``, ``_prefix``, ``_policy``,
``_optim``, ``_update``, ``_metrics``, ``_run``), imported from there.
"""

from __future__ import annotations

from osmosis_trainer.loop._data import plan_steps
from osmosis_trainer.loop._policy import attach_lora
from osmosis_trainer.loop._rollouts import GradedSample, RolloutSource, SequenceData, StepRollouts
from osmosis_trainer.loop._settings import LoopSettings, resolve_settings
from osmosis_trainer.loop._source import AdapterServer, GatewayRolloutSource, GroupRunner
from osmosis_trainer.loop._traces import TraceSampler, token_texts
from osmosis_trainer.loop._trainer import StepReport, Trainer, TrainResult
from osmosis_trainer.loop._update import NonFiniteLossError

__all__ = [
    "AdapterServer",
    "GatewayRolloutSource",
    "GradedSample",
    "GroupRunner",
    "LoopSettings",
    "NonFiniteLossError",
    "RolloutSource",
    "SequenceData",
    "StepReport",
    "StepRollouts",
    "TraceSampler",
    "TrainResult",
    "Trainer",
    "attach_lora",
    "plan_steps",
    "resolve_settings",
    "token_texts",
]
