"""The engine contract: one request in, one generation out, with the exact sampled tokens."""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from osmosis_ai.errors import OsmosisError
from osmosis_ai.rollout import Message, ToolCall

__all__ = [
    "ContextLengthError",
    "EngineError",
    "FinishReason",
    "GenerationRequest",
    "GenerationResult",
    "InferenceEngine",
]

FinishReason = Literal["stop", "length", "tool_calls"]


class EngineError(OsmosisError):
    """An engine could not serve a request.

    Attributes:
        status_code: the HTTP status the gateway answers with (502 upstream failure, 503
            engine unavailable, 400 a request the engine cannot serve).
        code: a short machine-readable code for the OpenAI-style error body.
        retry_after_s: sent as the ``Retry-After`` header when set.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int = 502,
        code: str = "engine_error",
        retry_after_s: float | None = None,
    ) -> None:
        self.status_code = status_code
        self.code = code
        self.retry_after_s = retry_after_s
        """Sent as ``Retry-After`` when set (an overloaded engine asking clients to wait)."""
        super().__init__(message)


class ContextLengthError(EngineError):
    """The rendered prompt does not fit the model's context window."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status_code=400, code="context_length_exceeded")


class GenerationRequest(BaseModel):
    """One chat generation, already validated and with the run's sampling enforced."""

    model_config = ConfigDict(extra="forbid")

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    """``"none"`` hides the tools from the model; other values are passed on where supported."""
    temperature: float = Field(default=1.0, ge=0.0)
    """0 means greedy decoding."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    """None: the engine's default, capped by the context window."""
    stop: list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1)
    rollout_id: str | None = None
    """The rollout the call belongs to (set by the gateway; engines may ignore it)."""
    sample_id: str | None = None
    """The sample within that rollout (set by the gateway; engines may ignore it)."""
    client_body: dict[str, Any] | None = None
    """The client's JSON body as sent, when the gateway keeps it
    (``PolicyGateway(keep_client_body=True)``; scripted test engines read it)."""


class GenerationResult(BaseModel):
    """What an engine produced for one request.

    ``completion_token_ids`` are the ids the sampler drew, in order, including a final EOS
    token when the model emitted one; ``logprobs[i]`` is the sampler's logprob of
    ``completion_token_ids[i]``. Token fields are ``None`` when the engine gives no token data
    (hosted APIs); such calls are recorded but not trainable.
    """

    model_config = ConfigDict(extra="forbid")

    message: Message
    """The assistant message in OpenAI chat shape (``tool_calls`` arguments are JSON strings)."""
    text: str
    """The decoded completion (without a final EOS token or a matched stop string)."""
    finish_reason: FinishReason
    tool_calls: list[ToolCall] = Field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    model: str = ""
    """The name the engine served the request under (base model or adapter name)."""
    policy_version: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


@runtime_checkable
class InferenceEngine(Protocol):
    """Something that turns chat requests into generations with token ids and logprobs.

    Implementations: :class:`~osmosis_ai.serving.OpenAIServerEngine` (any OpenAI-compatible
    server), :class:`~osmosis_ai.serving.LiteLLMEngine` (hosted APIs, no token ids),
    :class:`~osmosis_ai.testing.ScriptedEngine` (tests), and the trainer's ``HFEngine`` and
    ``VLLMEngine`` (plugged in through the ``osmosis.engines`` entry points).
    """

    name: str
    provides_token_ids: bool

    @property
    def policy_version(self) -> int:
        """The adapter version currently served (0 = the base model)."""
        ...

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        """Generate one reply to ``req``."""
        ...

    async def load_adapter(self, path: str, version: int) -> None:
        """Serve the PEFT adapter saved in folder ``path`` as policy version ``version``."""
        ...

    async def close(self) -> None:
        """Release the engine's resources (threads, subprocesses, connections)."""
        ...


@runtime_checkable
class KeepsRollouts(Protocol):
    """An engine that keeps state per rollout between its calls (the HF engine keeps each
    sample's last turn): the policy gateway tells it when a rollout has been collected."""

    def forget_rollout(self, rollout_id: str) -> None:
        """Drop what is kept for ``rollout_id``."""
        ...


@runtime_checkable
class FreesIdleMemory(Protocol):
    """Something that keeps memory only to answer fast and can give it up before a stretch
    without requests (the trainer's update): the HF engine's merged copy of the adapted
    layers, and the policy gateway and rollout source that pass the call on to it."""

    async def release_idle_memory(self) -> None:
        """Free that memory now; the next request or adapter load builds it again."""
        ...
