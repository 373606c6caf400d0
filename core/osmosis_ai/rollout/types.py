"""osmosis-ai 0.3's ``osmosis_ai.rollout.types``: configs, samples, statuses, backend requests.

The configs, :class:`RolloutSample` and :class:`AgentWorkflowOutput` are the classes the rest
of osmosis uses (``RolloutSample(messages=...)`` without an id is the ``"main"`` sample).
:class:`RolloutErrorCategory` is :class:`~osmosis_ai.rollout.ErrorCategory`. What is new here
is 0.3's backend contract: :class:`ExecutionRequest` / :class:`ExecutionResult` (what an
:class:`~osmosis_ai.rollout.backend.ExecutionBackend` takes and reports) and the rollout
lifecycle :class:`RolloutStatus`.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from osmosis_ai.rollout._types import AgentWorkflowOutput, ErrorCategory, RolloutSample
from osmosis_ai.rollout._workflow import (
    AgentWorkflowConfig,
    BaseConfig,
    ConcurrencyConfig,
    GraderConfig,
)
from osmosis_ai.rollout.context import SampleSource

__all__ = [
    "AgentWorkflowConfig",
    "AgentWorkflowOutput",
    "BaseConfig",
    "ConcurrencyConfig",
    "ExecutionRequest",
    "ExecutionResult",
    "GraderConfig",
    "MessageDict",
    "Messages",
    "RolloutErrorCategory",
    "RolloutSample",
    "RolloutStatus",
    "SampleSource",
]

MessageDict = dict[str, Any]
"""One chat message as a dict."""

Messages = list[dict[str, Any]]
"""A message history (what ``AgentWorkflow.run`` may return)."""

RolloutErrorCategory = ErrorCategory
"""Why a rollout failed (0.3's name for :class:`~osmosis_ai.rollout.ErrorCategory`)."""

_SEGMENT = re.compile(r"^[A-Za-z0-9_.:-]{1,256}$")


class RolloutStatus(StrEnum):
    """A rollout's lifecycle: in flight (queued, running, grading), then how it ended."""

    QUEUED = "queued"
    RUNNING = "running"
    GRADING = "grading"
    SUCCESS = "success"
    FAILURE = "failure"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


class ExecutionRequest(BaseModel):
    """One rollout for an :class:`~osmosis_ai.rollout.backend.ExecutionBackend` to run.

    Attributes:
        id: the rollout id (one path segment: letters, digits, ``_ . : -``).
        prompt: the row's chat messages.
        label: the row's ``ground_truth``.
        metadata: the row's other columns.
        agent_timeout_sec: the workflow's deadline (``None``: none).
        grader_timeout_sec: the grader's deadline (``None``: none).
    """

    id: str
    prompt: list[MessageDict]
    label: str | None = None
    metadata: dict[str, Any] | None = None
    agent_timeout_sec: float | None = None
    grader_timeout_sec: float | None = None

    @field_validator("id")
    @classmethod
    def _one_segment(cls, value: str) -> str:
        if not _SEGMENT.match(value) or value in {".", ".."}:
            raise ValueError(
                f"rollout_id {value!r} must be one path segment of 1-256 letters, digits, "
                "'_', '.', ':' or '-'"
            )
        return value

    @field_validator("agent_timeout_sec", "grader_timeout_sec")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("a timeout must be a finite number of seconds; omit it for none")
        return value


class ExecutionResult(BaseModel):
    """What a backend reports for a workflow run or a grading.

    Attributes:
        status: ``success`` or ``failure`` (``cancelled`` when it was cancelled).
        sample: the rollout's sample (with its reward once graded).
        err_message: what failed, when it failed.
        err_category: why it failed.
        extra_fields: backend diagnostics (not sent on the wire).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    status: RolloutStatus
    sample: RolloutSample | None = None
    err_message: str | None = None
    err_category: RolloutErrorCategory | None = None
    extra_fields: dict[str, Any] | None = None


def __getattr__(name: str) -> object:
    from osmosis_ai.rollout._moved import WIRE, missing

    raise missing(__name__, name, WIRE)
