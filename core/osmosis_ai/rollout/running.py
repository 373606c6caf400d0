"""Running rollouts: the runner that eval, ``osmosis test`` and the trainer drive.

Users write workflows and graders (:mod:`osmosis_ai.rollout`); this module is for the code that
runs them: load an entrypoint, run rows through a :class:`RolloutRunner` on a backend, and
read each rollout's :class:`RolloutOutcome`.
"""

from __future__ import annotations

from osmosis_ai.rollout._backends import Backend, LocalBackend, ProcessBackend
from osmosis_ai.rollout._discovery import Entrypoint, load_entrypoint, load_grader
from osmosis_ai.rollout._execution import WorkflowRequest, WorkflowRun, execute_workflow
from osmosis_ai.rollout._outcome import (
    RolloutGroup,
    RolloutOutcome,
    RolloutRow,
    classify_exception,
)
from osmosis_ai.rollout._remote_reward import (
    describe_reward_source,
    load_remote_grader,
    runner_reward_mode,
)
from osmosis_ai.rollout._runner import RolloutRunner

__all__ = [
    "Backend",
    "Entrypoint",
    "LocalBackend",
    "ProcessBackend",
    "RolloutGroup",
    "RolloutOutcome",
    "RolloutRow",
    "RolloutRunner",
    "WorkflowRequest",
    "WorkflowRun",
    "classify_exception",
    "describe_reward_source",
    "execute_workflow",
    "load_entrypoint",
    "load_grader",
    "load_remote_grader",
    "runner_reward_mode",
]
