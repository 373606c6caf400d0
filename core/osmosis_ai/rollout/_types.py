"""Wire and record types shared by the runner, the gateway, the adapters and the trainer."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from osmosis_ai.chat import ChatResult, Message

__all__ = [
    "AgentWorkflowOutput",
    "ChatResult",
    "ErrorCategory",
    "LLMCall",
    "Message",
    "RolloutSample",
    "SampleError",
    "SampleStatus",
    "ToolCall",
]



class ErrorCategory(StrEnum):
    """Why a sample or rollout failed. Failures are data: they are counted, never scored 0."""

    TIMEOUT = "timeout"
    VALIDATION_ERROR = "validation_error"
    HTTP_ERROR = "http_error"
    AGENT_ERROR = "agent_error"
    GRADER_ERROR = "grader_error"
    INTERNAL_ERROR = "internal_error"
    CANCELLED = "cancelled"
    CRASHED = "crashed"


class SampleStatus(StrEnum):
    SUCCESS = "success"
    FAILED = "failed"
    SKIPPED = "skipped"


class SampleError(BaseModel):
    """A failure recorded as data."""

    model_config = ConfigDict(extra="forbid")

    category: ErrorCategory
    message: str
    where: str = Field(default="workflow", description="'workflow', 'grader' or 'runner'.")


class ToolCall(BaseModel):
    """One tool call the model emitted. ``arguments`` is the raw JSON string the model produced."""

    id: str
    name: str
    arguments: str


class LLMCall(BaseModel):
    """One policy call, as recorded by the gateway (or by a client when no gateway is used).

    Token fields are the engine's own ids: training never re-tokenises text. They are ``None``
    when the engine gives no token data (hosted APIs), which makes the call not trainable.
    """

    model_config = ConfigDict(extra="forbid")

    call_id: str
    rollout_id: str
    sample_id: str
    request_messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    response_message: Message
    finish_reason: str
    tool_calls: list[ToolCall] = Field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = Field(
        default=None, description="Sampler logprob of each completion token."
    )
    model: str = ""
    policy_version: int | None = None
    latency_ms: float = 0.0
    started_at: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def trainable(self) -> bool:
        """True when the call carries the exact sampled ids and their logprobs."""
        return (
            self.prompt_token_ids is not None
            and self.completion_token_ids is not None
            and self.logprobs is not None
            and len(self.logprobs) == len(self.completion_token_ids)
        )


class RolloutSample(BaseModel):
    """One sample (one agent's trajectory) produced by a rollout.

    ``messages`` is the framework-native or chat-shaped history; ``calls`` are the token-level
    policy calls joined from the gateway. A failed sample keeps its error; it is never given a
    silent reward of 0.0.
    """

    model_config = ConfigDict(validate_assignment=True, allow_inf_nan=False)

    id: str = Field(
        default="main",
        description="The sample id within its rollout (an agent's name; 'main' by default, so "
        "a single-sample rollout can build RolloutSample(messages=...) as in osmosis-ai 0.3).",
    )
    messages: list[Message] = Field(default_factory=list)
    calls: list[LLMCall] = Field(default_factory=list)
    label: str | None = None
    reward: float | None = None
    remove_sample: bool = False
    metrics: dict[str, float] = Field(default_factory=dict)
    status: SampleStatus = SampleStatus.SUCCESS
    error: SampleError | None = None
    extra_fields: dict[str, Any] = Field(default_factory=dict)

    @property
    def trainable(self) -> bool:
        """True when the sample succeeded, has a reward and every call has token data."""
        return (
            self.status is SampleStatus.SUCCESS
            and self.reward is not None
            and not self.remove_sample
            and bool(self.calls)
            and all(c.trainable for c in self.calls)
        )


class AgentWorkflowOutput(BaseModel):
    """What a workflow may return: the messages of its main sample plus metrics."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    messages: list[Message] | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    info: dict[str, Any] = Field(default_factory=dict)

    @field_validator("metrics")
    @classmethod
    def _finite(cls, v: dict[str, float]) -> dict[str, float]:
        for k, x in v.items():
            if not math.isfinite(x):
                raise ValueError(f"metric {k!r} is {x}; metrics must be finite numbers")
        return v
