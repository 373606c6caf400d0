"""The sections of the eval and training TOML files (``[experiment]``, ``[training]``, ...)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from osmosis_ai.config._base import Section

__all__ = [
    "CheckpointsConfig",
    "EvaluationConfig",
    "ExperimentConfig",
    "RemoteConfig",
    "SamplingConfig",
    "SecretsConfig",
    "TrainingSection",
    "validate_env",
]

_ENV_KEY = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_SECRET_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_ROLLOUT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ExperimentConfig(Section):
    """``[experiment]``: what to run: the rollout, the model and the dataset."""

    rollout: str
    """The rollout's folder name under ``rollouts/`` in the workspace."""
    entrypoint: str
    """The entrypoint file inside the rollout folder (e.g. ``main.py``); it defines exactly one
    ``AgentWorkflow`` subclass and at most one ``Grader`` subclass."""
    model_path: str
    """The model: a LiteLLM model id for evaluation (``openai/gpt-4o-mini``), or the base model
    to train (a local Hugging Face folder, or ``embedded`` for the bundled SmolLM2)."""
    dataset: str
    """The dataset: a path relative to the workspace root (``data/multiply.jsonl``), or a bare
    name looked up as ``data/<name>.{jsonl,json,csv,parquet}``."""
    commit_sha: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{7,40}$")
    """Optional git commit (7-40 hex digits) of the workspace the run is pinned to (recorded)."""
    branch: str | None = None
    """Optional git branch the run is pinned to (recorded); not together with ``commit_sha``."""

    @field_validator("rollout")
    @classmethod
    def _rollout_name(cls, v: str) -> str:
        if not _ROLLOUT_NAME.fullmatch(v):
            raise ValueError(
                "must be a folder name under rollouts/ (letters, digits, '-', '_', '.')"
            )
        return v

    @field_validator("entrypoint")
    @classmethod
    def _inside_rollout(cls, v: str) -> str:
        parts = v.replace("\\", "/").split("/")
        if v.startswith(("/", "\\", "~")) or ":" in v or ".." in parts:
            raise ValueError(
                "must be a file inside the rollout folder, like 'main.py' (no absolute path, "
                "no '..')"
            )
        return v

    @field_validator("entrypoint", "model_path", "dataset")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @model_validator(mode="after")
    def _one_pin(self) -> ExperimentConfig:
        if self.commit_sha is not None and self.branch is not None:
            raise ValueError("set either commit_sha or branch, not both")
        return self


class TrainingSection(Section):
    """``[training]``: the GRPO loop's sizes, budgets and hardware."""

    lr: float = Field(default=1e-5, gt=0.0)
    """Learning rate of the LoRA parameters (AdamW)."""
    total_epochs: int = Field(default=1, ge=1)
    """Passes over the dataset."""
    n_samples_per_prompt: int = Field(default=8, ge=1)
    """Rollouts per dataset row: the GRPO group size (advantages are relative within it)."""
    rollout_batch_size: int = Field(default=32, ge=1)
    """Dataset rows per training step (each gives ``n_samples_per_prompt`` rollouts)."""
    max_prompt_length: int = Field(default=8192, ge=1)
    """Longest prompt, in tokens, a policy call may send; longer calls fail that sample."""
    max_response_length: int = Field(default=8192, ge=1)
    """Most tokens one policy call may generate."""
    agent_workflow_timeout_s: float = Field(default=450, gt=0)
    """Seconds one workflow run may take before it is recorded as a timeout."""
    grader_timeout_s: float = Field(default=150, gt=0)
    """Seconds one grading may take before it is recorded as a timeout."""
    max_steps: int | None = Field(default=None, ge=0)
    """Stop after this many optimiser steps, even within an epoch (``None``: no cap; 0: no RL
    steps, only the ``[warm_start]`` phase, which then must be set)."""
    seed: int = 0
    """Seed for data order, sampling and adapter initialisation."""
    concurrency: int | None = Field(default=None, ge=1)
    """Most rollouts in flight at once (``None``: one step's worth, batch x samples)."""
    engine: Literal["hf", "vllm"] = "hf"
    """Inference engine for rollouts: ``hf`` (transformers, CPU or GPU) or ``vllm``."""
    device: str = "auto"
    """Torch device for training and the ``hf`` engine: ``auto``, ``cpu``, ``cuda``, ``cuda:1``."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Precision of the frozen base weights, in the training forward pass and the rollout
    engine (the LoRA weights and the optimiser state stay float32). ``auto``: bfloat16 on CUDA
    and on CPUs with native bf16 matrix units (AVX512-BF16 or AMX), float32 elsewhere."""
    vllm_gpu_memory_utilization: float = Field(default=0.35, gt=0.0, le=1.0)
    """With ``engine = "vllm"`` on a GPU: the fraction of GPU memory vLLM may take (weights
    and KV cache); training shares the device and uses the rest."""

    @property
    def step_concurrency(self) -> int:
        """Rollouts in flight at once: ``concurrency``, or one step's worth (batch x samples)."""
        return self.concurrency or self.rollout_batch_size * self.n_samples_per_prompt


class SamplingConfig(Section):
    """``[sampling]``: how the policy samples during rollouts."""

    rollout_temperature: float = Field(default=1.0, ge=0.0)
    """Sampling temperature of policy calls."""
    rollout_top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus sampling probability mass."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most tokens per policy call (``None``: the engine's or ``max_response_length``)."""

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> SamplingConfig:
        """The section back from :meth:`as_params`'s chat parameters (absent keys: defaults)."""
        names = {"temperature": "rollout_temperature", "top_p": "rollout_top_p"}
        fields = {names.get(k, k): v for k, v in params.items() if v is not None}
        return cls.model_validate(fields, strict=False)

    def as_params(self) -> dict[str, Any]:
        """The chat-completion parameters for ``RolloutRunner(sampling=...)``."""
        params: dict[str, Any] = {
            "temperature": self.rollout_temperature,
            "top_p": self.rollout_top_p,
        }
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        return params


class CheckpointsConfig(Section):
    """``[checkpoints]``: when to save the adapter and evaluate."""

    checkpoint_save_freq: int = Field(default=20, ge=1)
    """Save a PEFT adapter checkpoint every this many steps (and at the end)."""
    eval_interval: int | None = Field(default=None, ge=1)
    """Run the ``[evaluation]`` settings every this many steps (``None``: never)."""
    output_dir: str | None = None
    """Where runs write checkpoints and metrics, relative to the workspace root
    (``None``: the run store's folder)."""


class EvaluationConfig(Section):
    """``[evaluation]``: local evaluation of a rollout (``osmosis eval run``)."""

    limit: int | None = Field(default=None, ge=1)
    """Evaluate only the first ``limit`` rows (``None``: all)."""
    n: int = Field(default=1, ge=1)
    """Runs per row; pass@k is reported for powers of two k <= n."""
    batch_size: int = Field(default=1, ge=1)
    """Rows started together (kept for upstream compatibility; ``concurrency`` bounds work)."""
    pass_threshold: float = 1.0
    """A run passes when its reward is >= this."""
    agent_workflow_timeout_s: float = Field(default=450, gt=0)
    """Seconds one workflow run may take before it is recorded as a timeout."""
    grader_timeout_s: float = Field(default=150, gt=0)
    """Seconds one grading may take before it is recorded as a timeout."""
    concurrency: int | None = Field(default=None, ge=1)
    """Most rollouts in flight at once (``None``: the runner's default)."""


class RemoteConfig(Section):
    """``[remote]``: train against a remote rollout server instead of a local entrypoint."""

    server_url: str = Field(pattern=r"^https?://[^/\s]+")
    """Base URL of the rollout server (``http://host:port``)."""
    api_key: str | None = None
    """Bearer token the server expects (``None``: no auth)."""
    reward: Literal["auto", "server", "grader"] = "auto"
    """Where each rollout's reward comes from. ``"auto"`` (default): the server's, when it
    sends one with its result (``ctx.complete(messages, reward=...)``), else the ``Grader``
    defined in ``[experiment] entrypoint``; with no Grader there, the config fails at validate
    time (``osmosis validate``, ``train submit``), since a server may leave rewards out.
    ``"server"``: always the server's; a result without one fails its sample (no Grader is
    loaded). ``"grader"``: always the Grader's, from the final messages the server sent and the
    row's label; a reward the server sends is ignored."""


class SecretsConfig(Section):
    """``[secrets]``: environment variables the rollout needs that must not live in the file."""

    required: list[str] = Field(default_factory=list)
    """Names of environment variables that must be set before the run starts."""

    @field_validator("required")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _SECRET_NAME.match(name):
                raise ValueError(f"secret name {name!r} must match ^[A-Z][A-Z0-9_]*$")
        dupes = sorted({n for n in v if v.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate secret names: {', '.join(dupes)}")
        return v


def validate_env(env: dict[str, str]) -> dict[str, str]:
    """Check ``[env]`` keys (``^[A-Z_][A-Z0-9_]*$``, not ``_OSMOSIS_*``)."""
    for key in env:
        if not _ENV_KEY.match(key):
            raise ValueError(f"env key {key!r} must match ^[A-Z_][A-Z0-9_]*$")
        if key.startswith("_OSMOSIS_"):
            raise ValueError(f"env key {key!r}: names starting with _OSMOSIS_ are reserved")
    return env
