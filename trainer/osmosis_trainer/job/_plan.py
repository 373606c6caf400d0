"""``plan_job``: what a training config resolves to before anything heavy is loaded."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from osmosis_ai.errors import ConfigError
from osmosis_trainer.loop import plan_steps

if TYPE_CHECKING:
    from osmosis_ai.config import TrainingConfig
    from osmosis_ai.data import DatasetRow, Demonstration

__all__ = ["JobPlan", "needs_entrypoint", "plan_job", "resolve_device"]

logger = logging.getLogger("osmosis")


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when a GPU is visible, else ``cpu``."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"



@dataclass
class JobPlan:
    """What a config resolves to before anything heavy is loaded (printed by the CLI)."""

    entrypoint: Path
    dataset: Path
    rows: list[DatasetRow]
    total_steps: int
    device: str
    engine: str
    demonstrations: list[Demonstration] = field(default_factory=list)
    """``[warm_start]``: the valid demonstration rows (read and checked, not yet rendered)."""
    bad_demonstrations: int = 0
    """``[warm_start] on_bad_row = "skip"``: rows left out as malformed."""



def needs_entrypoint(config: TrainingConfig) -> bool:
    """Whether the run loads ``[experiment] entrypoint``: its workflow runs here, or (with
    ``[remote] reward = "grader"`` or ``"auto"``) its Grader scores the remote server's
    rollouts (``"auto"``: those the server sent without a reward)."""
    return config.remote is None or config.remote.reward != "server"



def plan_job(config: TrainingConfig) -> JobPlan:
    """Check the config's files and size the run (fast: no model is loaded)."""
    from osmosis_ai.data import read_dataset

    missing = config.missing_secrets()
    if missing:
        raise ConfigError(
            f"{config.source_path}: [secrets].required names {', '.join(missing)}, which "
            "are not set in the environment; export them before 'osmosis train submit'"
        )
    # With [remote] the agent loop lives in the user's server; a local entrypoint is needed
    # only for its Grader ([remote] reward = "grader").
    entrypoint = config.entrypoint_path(must_exist=needs_entrypoint(config))
    dataset = config.dataset_path()
    rows = list(read_dataset(dataset))
    if not rows:
        raise ConfigError(f"{config.source_path}: the dataset {dataset} has no rows")
    t = config.training
    total = plan_steps(len(rows), t.rollout_batch_size, t.total_epochs, t.max_steps)
    plan = JobPlan(entrypoint, dataset, rows, total, resolve_device(t.device), t.engine)
    if config.warm_start is not None:
        _plan_warm_start(config, plan)
    return plan



def _plan_warm_start(config: TrainingConfig, plan: JobPlan) -> None:
    """Read and check the demonstrations before any model loads (errors name file:line)."""
    from osmosis_ai.data import load_demonstrations

    ws = config.warm_start
    assert ws is not None
    path = config.warm_start_dataset_path()
    assert path is not None
    demos, problems = load_demonstrations(path, on_bad_row=ws.on_bad_row)
    for problem in problems[:5]:
        logger.warning("[warm_start] skipped a malformed row: %s", problem)
    if not demos:
        raise ConfigError(
            f"{config.source_path}: [warm_start].dataset {path} has no valid demonstration "
            f"({len(problems)} malformed rows); check it with 'osmosis dataset validate {path}'"
        )
    plan.demonstrations = demos
    plan.bad_demonstrations = len(problems)

