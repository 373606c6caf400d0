"""The GRPO training loop: orchestration over :mod:`osmosis_trainer.grpo`."""

from __future__ import annotations

from osmosis_trainer.loop._batch import (
    MicroBatch,
    SharedPrefix,
    TrainSequence,
    collate,
    common_prefix_len,
    plan_micro_batches,
)
from osmosis_trainer.loop._data import DataCursor, plan_steps
from osmosis_trainer.loop._job import (
    JobPlan,
    plan_job,
    resolve_device,
    run_training,
)
from osmosis_trainer.loop._metrics import MetricsWriter, read_metrics
from osmosis_trainer.loop._optim import build_optimizer, build_scheduler
from osmosis_trainer.loop._policy import (
    adapter_disabled,
    attach_lora,
    load_adapter_weights,
    lora_parameters,
    token_logprobs,
)
from osmosis_trainer.loop._prefix import PrefixUnit, collate_prefixed, plan_shared_prefix
from osmosis_trainer.loop._rollouts import (
    GradedSample,
    RolloutSource,
    SequenceData,
    StepRollouts,
    TrainBatch,
    build_train_batch,
)
from osmosis_trainer.loop._run import RunDir, RunStatus, create_run_dir, read_status
from osmosis_trainer.loop._settings import LoopSettings, resolve_settings
from osmosis_trainer.loop._source import GatewayRolloutSource, sample_sequences
from osmosis_trainer.loop._trainer import StepReport, Trainer, TrainResult
from osmosis_trainer.loop._update import NonFiniteLossError, UpdateStats, policy_update

__all__ = [
    "DataCursor",
    "GatewayRolloutSource",
    "JobPlan",
    "LoopSettings",
    "GradedSample",
    "MetricsWriter",
    "MicroBatch",
    "NonFiniteLossError",
    "PrefixUnit",
    "RolloutSource",
    "RunDir",
    "RunStatus",
    "SequenceData",
    "SharedPrefix",
    "StepReport",
    "StepRollouts",
    "TrainBatch",
    "TrainResult",
    "TrainSequence",
    "Trainer",
    "UpdateStats",
    "adapter_disabled",
    "attach_lora",
    "build_optimizer",
    "build_scheduler",
    "build_train_batch",
    "collate",
    "collate_prefixed",
    "common_prefix_len",
    "create_run_dir",
    "load_adapter_weights",
    "lora_parameters",
    "plan_job",
    "plan_micro_batches",
    "plan_shared_prefix",
    "plan_steps",
    "policy_update",
    "read_metrics",
    "read_status",
    "resolve_settings",
    "resolve_device",
    "run_training",
    "sample_sequences",
    "token_logprobs",
]
