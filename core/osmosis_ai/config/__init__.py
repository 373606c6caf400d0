"""The eval and training TOML configs as pydantic models.

::

    from osmosis_ai.config import load_training_config

    config = load_training_config("configs/training/multiply.toml")
    config.training.n_samples_per_prompt      # 8
    config.entrypoint_path()                  # <workspace>/rollouts/multiply/main.py

Unknown sections and keys are errors that name the file, the line, the key path and the closest
valid name. Relative paths resolve against the workspace root: the folder that holds
``configs/`` (``configs/eval/x.toml`` -> two folders up), else the current directory.
"""

from __future__ import annotations

from osmosis_ai.config._algorithm import (
    AlgorithmConfig,
    ImportanceCorrection,
    LoRAConfig,
    LossType,
    LRSchedule,
    ScaleRewards,
)
from osmosis_ai.config._files import ConfigFile, EvalConfig, TrainingConfig, find_workspace_root
from osmosis_ai.config._gateway import GatewayConfig
from osmosis_ai.config._heldout import HeldOutConfig
from osmosis_ai.config._load import load_config, load_eval_config, load_training_config
from osmosis_ai.config._redact import (
    REDACTED,
    dumps_toml,
    is_secret_key,
    literal_secrets,
    redact_config,
    redact_url,
    redact_urls,
    restore_secrets,
    secret_values,
)
from osmosis_ai.config._sections import (
    CheckpointsConfig,
    EvaluationConfig,
    ExperimentConfig,
    RemoteConfig,
    SamplingConfig,
    SecretsConfig,
    TrainingSection,
)
from osmosis_ai.config._warm_start import WarmStartConfig

__all__ = [
    "REDACTED",
    "AlgorithmConfig",
    "CheckpointsConfig",
    "ConfigFile",
    "EvalConfig",
    "EvaluationConfig",
    "ExperimentConfig",
    "GatewayConfig",
    "HeldOutConfig",
    "ImportanceCorrection",
    "LRSchedule",
    "LoRAConfig",
    "LossType",
    "RemoteConfig",
    "SamplingConfig",
    "ScaleRewards",
    "SecretsConfig",
    "TrainingConfig",
    "TrainingSection",
    "WarmStartConfig",
    "dumps_toml",
    "find_workspace_root",
    "is_secret_key",
    "literal_secrets",
    "load_config",
    "load_eval_config",
    "load_training_config",
    "redact_config",
    "redact_url",
    "redact_urls",
    "restore_secrets",
    "secret_values",
]
