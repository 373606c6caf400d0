"""The two config files: :class:`EvalConfig` and :class:`TrainingConfig`, with path resolution."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from osmosis_ai.config._algorithm import AlgorithmConfig, LoRAConfig
from osmosis_ai.config._cluster import ClusterConfig
from osmosis_ai.config._gateway import GatewayConfig
from osmosis_ai.config._heldout import HeldOutConfig
from osmosis_ai.config._lines import key_lines
from osmosis_ai.config._logging import LoggingConfig
from osmosis_ai.config._sections import (
    CheckpointsConfig,
    EvaluationConfig,
    ExperimentConfig,
    RemoteConfig,
    SamplingConfig,
    SecretsConfig,
    TrainingSection,
    validate_env,
)
from osmosis_ai.config._warm_start import WarmStartConfig
from osmosis_ai.errors import ConfigError, UnreadableFileError
from osmosis_ai.safe_io import read_text

__all__ = ["ConfigFile", "EvalConfig", "TrainingConfig", "find_workspace_root"]

_DATASET_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def find_workspace_root(config_path: str | os.PathLike[str]) -> Path:
    """The workspace root of a config file: the folder that holds its ``configs/`` folder.

    ``<ws>/configs/eval/x.toml`` -> ``<ws>``. A config outside any ``configs/`` folder belongs to
    the current working directory.
    """
    for parent in Path(config_path).resolve().parents:
        if parent.name == "configs":
            return parent.parent
    return Path.cwd()


class ConfigFile(BaseModel):
    """What eval and training configs share: ``[experiment]``, ``[env]``, ``[secrets]``,
    ``[remote]``, ``[gateway]``, and resolution of paths against the workspace root."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    experiment: ExperimentConfig
    """What to run: rollout, entrypoint, model and dataset."""
    env: dict[str, str] = Field(default_factory=dict)
    """``[env]``: environment variables set for the rollout (string values)."""
    secrets: SecretsConfig = Field(default_factory=SecretsConfig)
    """``[secrets]``: environment variables that must be set, kept out of the file."""
    remote: RemoteConfig | None = None
    """``[remote]``: a remote rollout server to run rollouts on instead of the entrypoint."""
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    """``[gateway]``: limits of the policy gateway the run starts (request body size)."""
    advanced: dict[str, Any] = Field(default_factory=dict)
    """``[advanced]``: the original osmosis-ai 0.3 configs' pass-through table of hosted-trainer
    settings. Accepted and recorded with the run's config copy; none of its keys is used here
    (:meth:`ignored_advanced` names them so the CLI can say so)."""

    _source_path: Path | None = PrivateAttr(default=None)
    _workspace_root: Path | None = PrivateAttr(default=None)

    @field_validator("env")
    @classmethod
    def _env_keys(cls, v: dict[str, str]) -> dict[str, str]:
        return validate_env(v)

    @model_validator(mode="after")
    def _secrets_not_in_env(self) -> ConfigFile:
        both = sorted(set(self.secrets.required) & set(self.env))
        if both:
            raise ValueError(
                f"{', '.join(both)} appear in both [env] and [secrets].required; a secret must "
                "not be written in the file: remove it from [env]"
            )
        return self

    @property
    def source_path(self) -> Path | None:
        """The TOML file this config was loaded from (``None`` when built in code)."""
        return self._source_path

    @property
    def workspace_root(self) -> Path:
        """The folder relative paths resolve against (see :func:`find_workspace_root`)."""
        return self._workspace_root or Path.cwd()

    def _bind(self, source: Path) -> None:
        self._source_path = source.resolve()
        self._workspace_root = find_workspace_root(source)

    def _where(self) -> str:
        return str(self._source_path) if self._source_path else "config"

    def _where_key(self, *keys: str) -> str:
        """``file:line`` of a key of the source file (``file`` when the line is unknown)."""
        if self._source_path is None:
            return "config"
        try:
            line = key_lines(read_text(self._source_path)).get(keys)
        except (OSError, UnreadableFileError):
            line = None
        return f"{self._source_path}:{line}" if line else str(self._source_path)

    def resolve_path(self, value: str | os.PathLike[str]) -> Path:
        """Resolve a path from the config against the workspace root (absolute paths stay)."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.workspace_root / p

    def rollout_dir(self, *, must_exist: bool = True) -> Path:
        """``<workspace>/rollouts/<[experiment].rollout>``."""
        path = self.workspace_root / "rollouts" / self.experiment.rollout
        if must_exist and not path.is_dir():
            parent = path.parent
            found = (
                sorted(p.name for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []
            )
            raise ConfigError(
                f"{self._where()}: [experiment].rollout = {self.experiment.rollout!r}: folder "
                f"{path} not found (rollouts found: {', '.join(found) or 'none'}). Rollouts live "
                f"in rollouts/<name>/ under the workspace root {self.workspace_root}"
            )
        return path

    def entrypoint_path(self, *, must_exist: bool = True) -> Path:
        """``<workspace>/rollouts/<rollout>/<[experiment].entrypoint>``."""
        folder = self.rollout_dir(must_exist=must_exist)
        path = folder / self.experiment.entrypoint
        if must_exist and not path.resolve().is_relative_to(folder.resolve()):
            raise ConfigError(  # e.g. a symlink: only code inside the rollout folder is run
                f"{self._where()}: [experiment].entrypoint = {self.experiment.entrypoint!r}: "
                f"resolves outside the rollout folder {folder}"
            )
        if must_exist and not path.is_file():
            found = sorted(p.name for p in path.parent.glob("*.py"))
            raise ConfigError(
                f"{self._where()}: [experiment].entrypoint = {self.experiment.entrypoint!r}: "
                f"file {path} not found (Python files there: {', '.join(found) or 'none'})"
            )
        return path

    def dataset_path(self, *, must_exist: bool = True) -> Path:
        """The dataset file: ``[experiment].dataset`` as a path relative to the workspace root,
        or, for a bare name without a suffix, ``data/<name>.{jsonl,json,csv,parquet}``."""
        value = self.experiment.dataset
        direct = self.resolve_path(value)
        candidates = [direct]
        if direct.suffix.lower() not in _DATASET_SUFFIXES:
            data = self.workspace_root / "data"
            candidates += [data / f"{value}{s}" for s in _DATASET_SUFFIXES]
        for c in candidates:
            if c.is_file():
                return c
        if not must_exist:
            return direct
        tried = ", ".join(str(c) for c in candidates)
        raise ConfigError(
            f"{self._where()}: [experiment].dataset = {value!r}: no dataset file found "
            f"(tried {tried}). Give a path relative to the workspace root "
            f"{self.workspace_root}, or put <name>.jsonl under data/"
        )

    def ignored_advanced(self) -> list[str]:
        """The ``[advanced]`` keys, sorted: accepted for 0.3 configs, used by nothing here."""
        return sorted(self.advanced)

    def missing_secrets(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The ``[secrets].required`` names not set in ``environ`` (default ``os.environ``)."""
        env = os.environ if environ is None else environ
        return [name for name in self.secrets.required if not env.get(name)]


class EvalConfig(ConfigFile):
    """``configs/eval/<name>.toml``: evaluate a rollout against a model on a dataset."""

    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    """``[evaluation]``: rows, runs per row, pass threshold, timeouts."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    """``[sampling]``: temperature, top_p and max_tokens of policy calls."""


class TrainingConfig(ConfigFile):
    """``configs/training/<name>.toml``: train a LoRA adapter on a rollout with GRPO."""

    training: TrainingSection = Field(default_factory=TrainingSection)
    """``[training]``: learning rate, epochs, group size, batch size, budgets."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    """``[sampling]``: temperature, top_p and max_tokens of rollout policy calls."""
    checkpoints: CheckpointsConfig = Field(default_factory=CheckpointsConfig)
    """``[checkpoints]``: save frequency, eval interval, output folder."""
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    """``[evaluation]``: the periodic evaluation run every ``eval_interval`` steps."""
    lora: LoRAConfig = Field(default_factory=LoRAConfig)
    """``[lora]``: rank, alpha, dropout and target modules of the adapter."""
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """``[algorithm]``: the GRPO objective (loss type, clipping, IS correction, budgets)."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """``[logging]``: trackers (``report_to``) and the trajectories kept for the dashboard."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    """``[cluster]``: run rollout workers on a Ray cluster (absent ``address``: one process)."""
    heldout: HeldOutConfig | None = None
    """``[heldout]``: at the end, the trained adapter against its base model on held-out rows."""
    warm_start: WarmStartConfig | None = None
    """``[warm_start]``: a supervised phase on demonstrations before RL step 1."""

    @model_validator(mode="after")
    def _zero_steps_need_a_warm_start(self) -> TrainingConfig:
        if self.training.max_steps == 0 and self.warm_start is None:
            raise ValueError(
                "[training].max_steps = 0 trains nothing without a [warm_start] section; "
                "add [warm_start] with its dataset, or set max_steps >= 1"
            )
        return self

    def warm_start_dataset_path(self, *, must_exist: bool = True) -> Path | None:
        """``[warm_start].dataset`` resolved against the workspace root (``None`` without
        ``[warm_start]``)."""
        if self.warm_start is None:
            return None
        value = self.warm_start.dataset
        path = self.resolve_path(value)
        if must_exist and not path.is_file():
            near = (
                sorted(p.name for p in path.parent.glob("*.jsonl")) if path.parent.is_dir() else []
            )
            raise ConfigError(
                f"{self._where_key('warm_start', 'dataset')}: [warm_start].dataset = {value!r}: "
                f"file {path} not found "
                f"(.jsonl files there: {', '.join(near) or 'none'}). Give a path relative to "
                f"the workspace root {self.workspace_root}"
            )
        return path

    def output_dir(self) -> Path | None:
        """``[checkpoints].output_dir`` resolved against the workspace root, if set."""
        out = self.checkpoints.output_dir
        return self.resolve_path(out) if out else None
