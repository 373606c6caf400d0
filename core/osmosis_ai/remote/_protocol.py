"""Wire types of the remote-rollout protocol (G1): init request/response, result, callback.

The training cluster posts a :class:`RolloutRequest` to ``/v1/rollout/init``; the server answers
:class:`InitResponse` (202), runs the agent loop, and posts a :class:`RolloutResponse` to
``{server_url}/v1/rollout/completed``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from enum import StrEnum
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from osmosis_ai.chat import ChatResult, Message
from osmosis_ai.config import redact_url  # re-exported: the one URL redaction
from osmosis_ai.remote._limits import check_plain_json

__all__ = [
    "DEFAULT_MAX_METADATA_BYTES",
    "CompletionParams",
    "CompletionsResult",
    "InitResponse",
    "RolloutMetrics",
    "RolloutRecordView",
    "RolloutRequest",
    "RolloutResponse",
    "RolloutResult",
    "RolloutState",
    "RolloutStatus",
    "redact_url",
]

DEFAULT_MAX_METADATA_BYTES = 1_000_000

CompletionsResult = ChatResult
"""What ``await ctx.chat(...)`` returns (``.message``, ``.tool_calls``, ``.has_tool_calls``,
``.content``, ``.usage``, ``.finish_reason``, ``.token_ids``, ``.logprobs``)."""


class RolloutStatus(StrEnum):
    """Terminal status of a remote rollout."""

    COMPLETED = "COMPLETED"
    ERROR = "ERROR"


class CompletionParams(BaseModel):
    """Sampling parameters the training cluster wants for every LLM call of the rollout.

    Unknown keys are kept and forwarded to the chat endpoint as they are.
    """

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    temperature: float | None = Field(default=None, ge=0.0, le=100.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    stop: list[str] | str | None = None
    logprobs: bool | None = None

    # A read-only mapping of the parameters that are set, so seed code can forward them as
    # keywords: ``await ctx.chat(messages, **ctx.request.completion_params)``.
    def keys(self) -> list[str]:
        return [k for k, v in self._set_items() if v is not None]

    def __getitem__(self, key: str) -> Any:
        for k, v in self._set_items():
            if k == key and v is not None:
                return v
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def _set_items(self) -> Iterator[tuple[str, Any]]:
        for name in type(self).model_fields:
            yield name, getattr(self, name)
        yield from (self.model_extra or {}).items()


class RolloutRequest(BaseModel):
    """Body of ``POST /v1/rollout/init``.

    Attributes:
        rollout_id: the cluster's id of this rollout (1-256 characters, not blank).
        server_url: base URL of the training cluster; the server calls
            ``{server_url}/v1/chat/completions`` and ``{server_url}/v1/rollout/completed``.
        messages: the initial chat messages (system and user prompt).
        completion_params: sampling parameters to send with every LLM call.
        tool_server_url: optional URL of a tool server the loop may use.
        max_turns: most LLM calls the loop may make; one more ends it with ``max_turns``.
        max_tokens_total: most tokens (prompt + completion of the latest call) the rollout may
            reach; going over ends it with ``max_tokens``.
        metadata: free-form data about the row (the label travels as ``ground_truth``).
        api_key: bearer token the server sends with its callbacks to ``server_url``.
        idempotency_key: deduplicates retried inits; defaults to ``rollout_id``.
    """

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    rollout_id: str = Field(min_length=1, max_length=256)
    server_url: str = Field(min_length=1, max_length=2048)
    messages: list[Message] = Field(default_factory=list)
    completion_params: CompletionParams = Field(default_factory=CompletionParams)
    tool_server_url: str | None = Field(default=None, max_length=2048)
    max_turns: int = Field(default=10, ge=1, le=10_000)
    max_tokens_total: int = Field(default=8192, ge=1, le=100_000_000)
    metadata: dict[str, Any] = Field(default_factory=dict)
    api_key: str | None = Field(default=None, max_length=4096)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)

    @model_validator(mode="before")
    @classmethod
    def _plain_json(cls, data: Any) -> Any:
        # Bounded depth and encodable text before anything else looks at the values: deep
        # nesting breaks serializers later (after the 202), a lone surrogate the callback.
        if isinstance(data, dict):
            for name in ("rollout_id", "idempotency_key", "messages", "metadata", "completion_params"):
                if name in data:
                    check_plain_json(data[name], name)
        return data

    @field_validator("api_key")
    @classmethod
    def _header_safe(cls, v: str | None) -> str | None:
        if v is not None and not all(0x21 <= ord(c) <= 0x7E for c in v):
            raise ValueError(
                "api_key must be printable ASCII without spaces (it is sent in an HTTP header)"
            )
        return v

    @field_validator("rollout_id")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("rollout_id must not be blank")
        return v

    @field_validator("server_url", "tool_server_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            parts = urlsplit(v)
            host = parts.hostname
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError as exc:
            raise ValueError(f"{v!r} is not a valid URL: {exc}") from exc
        if parts.scheme not in ("http", "https") or not host:
            raise ValueError(f"{v!r} must be an http(s) URL with a host, e.g. http://10.0.0.5:8000")
        return v.rstrip("/")

    @field_validator("metadata")
    @classmethod
    def _metadata_size(cls, v: dict[str, Any]) -> dict[str, Any]:
        try:
            size = len(json.dumps(v, allow_nan=False).encode())
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metadata must be plain JSON: {exc}") from exc
        if size > DEFAULT_MAX_METADATA_BYTES:
            raise ValueError(
                f"metadata is {size} bytes as JSON; the limit is {DEFAULT_MAX_METADATA_BYTES}"
            )
        return v

    @property
    def dedup_key(self) -> str:
        """The key that makes init idempotent: ``idempotency_key``, else ``rollout_id``."""
        return self.idempotency_key or self.rollout_id


class InitResponse(BaseModel):
    """The 202 answer to an init: the rollout id and the tools the agent offers."""

    rollout_id: str
    tools: list[dict[str, Any]] = Field(default_factory=list)


class RolloutMetrics(BaseModel):
    """Counters the context keeps while the loop runs (milliseconds and tokens)."""

    model_config = ConfigDict(allow_inf_nan=False)

    total_latency_ms: float = 0.0
    llm_latency_ms: float = 0.0
    tool_latency_ms: float = 0.0
    num_llm_calls: int = 0
    num_tool_calls: int = 0
    prompt_tokens: int = 0
    response_tokens: int = 0
    max_context_tokens: int = 0


class RolloutResult(BaseModel):
    """What an agent loop's ``run`` returns; build it with ``ctx.complete`` or ``ctx.error``."""

    model_config = ConfigDict(allow_inf_nan=False)

    status: RolloutStatus
    final_messages: list[Message] = Field(default_factory=list)
    finish_reason: str | None = None
    error_message: str | None = None
    metrics: RolloutMetrics | None = None
    reward: float | None = None
    extra_fields: dict[str, Any] = Field(default_factory=dict)


class RolloutResponse(BaseModel):
    """Body of the ``POST {server_url}/v1/rollout/completed`` callback."""

    model_config = ConfigDict(allow_inf_nan=False)

    rollout_id: str
    status: RolloutStatus
    final_messages: list[Message] = Field(default_factory=list)
    finish_reason: str | None = None
    error_message: str | None = None
    reward: float | None = None
    metrics: RolloutMetrics | None = None
    extra_fields: dict[str, Any] = Field(default_factory=dict)


RolloutState = Literal["queued", "running", "delivering", "delivered", "delivery_failed"]
"""Where a rollout is on the server: waiting for a slot, running, posting its result, done."""


class RolloutRecordView(BaseModel):
    """Answer of ``GET /v1/rollout/{rollout_id}``: state, and the result once known.

    A cluster that missed the completion callback can read the result here.
    """

    rollout_id: str
    state: RolloutState
    result: RolloutResponse | None = None
    delivery_error: str | None = None
