"""``[cluster]`` of a training config: run rollouts on a Ray cluster instead of one process."""

from __future__ import annotations

from pydantic import Field, field_validator

from osmosis_ai.config._base import Section

__all__ = ["ClusterConfig"]


class ClusterConfig(Section):
    """``[cluster]``: where rollout workers run. Leave ``address`` out to train in one process."""

    address: str | None = None
    """The Ray cluster to join: ``"auto"`` (the cluster this machine's ``ray start`` joined),
    ``"ray://host:10001"`` (Ray Client) or ``"host:6379"`` (the head's GCS address). Absent:
    one process, no Ray, as without the section."""
    rollout_workers: int = Field(default=2, ge=1, le=4096)
    """Rollout worker actors (each runs workflows; the trainer process stays the driver and
    serves the policy gateway they call). Spread across the cluster's nodes."""
    worker_cpus: float = Field(default=1.0, gt=0, le=1024)
    """CPUs Ray reserves for each rollout worker (fractions allowed, e.g. ``0.5``)."""
    engines: int = Field(default=0, ge=0, le=4096)
    """Inference engines as Ray actors behind the driver's policy gateway (``[training] engine``
    ``hf``: each its own model copy; ``vllm``: each one vLLM server on its ``engine_gpus``).
    Each engine is placed with its share of the rollout workers on one node (one
    placement-group bundle per engine), engines on different nodes; a sample's calls go to
    the engine on its worker's node, to another one if that engine died. After each step only
    the adapter is shipped to every engine, and each confirms the version it serves. 0: the
    trainer's own engine serves every call (one machine's GPU)."""
    engine_gpus: float = Field(default=0.0, ge=0, le=64)
    """GPUs per engine actor (0: the engines decode on CPU). Ray assigns them; a vLLM engine
    sees exactly those (``CUDA_VISIBLE_DEVICES``), more than one runs it tensor-parallel."""
    engine_cpus: float = Field(default=1.0, gt=0, le=1024)
    """CPUs Ray reserves for each engine actor."""
    max_retries: int = Field(default=2, ge=0, le=100)
    """How often a rollout whose worker died is started again on another worker before it
    counts as failed (category ``crashed``)."""
    ship_rollout: bool = True
    """Ship the rollout folder to every worker with Ray's ``runtime_env`` (``working_dir``),
    so nodes need no copy of it. ``false``: workers import it from the driver's path (every
    node must have the same path, e.g. a shared file system)."""
    gateway_host: str = "127.0.0.1"
    """The address workers use to reach the driver's policy gateway; on several machines
    set the driver's cluster-visible IP (the gateway then listens on it)."""

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if not value:
            raise ValueError("address is empty: write \"auto\", \"ray://host:10001\" or \"host:6379\", "
                             "or leave [cluster] out to train in one process")
        return value
