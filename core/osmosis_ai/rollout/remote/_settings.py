"""Settings of the remote-rollout client (LLM calls, callbacks) and server (limits).

Each field can be set from the environment: ``OSMOSIS_ROLLOUT_CLIENT_<FIELD>`` and
``OSMOSIS_ROLLOUT_SERVER_<FIELD>`` (upper case), e.g. ``OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS=20``.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from osmosis_ai.errors import ConfigError

__all__ = ["ClientSettings", "ServerSettings"]

_T = TypeVar("_T", bound="_EnvSettings")


class _EnvSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    env_prefix: ClassVar[str] = ""

    @classmethod
    def from_env(cls: type[_T], environ: dict[str, str] | None = None, **overrides: Any) -> _T:
        """Build from defaults, then ``OSMOSIS_ROLLOUT_*`` variables, then ``overrides``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        prefix = cls.env_prefix
        for name in cls.model_fields:
            key = prefix + name.upper()
            if key in env:
                values[name] = env[key]
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise ConfigError(
                f"invalid {cls.__name__} value for {prefix}{field.upper()}: {first['msg']}"
            ) from exc


class ClientSettings(_EnvSettings):
    """How the server talks to the training cluster (env prefix ``OSMOSIS_ROLLOUT_CLIENT_``)."""

    env_prefix: ClassVar[str] = "OSMOSIS_ROLLOUT_CLIENT_"

    timeout_seconds: float = Field(default=300.0, gt=0, description="Read timeout of one LLM call.")
    connect_timeout_seconds: float = Field(default=10.0, gt=0)
    max_retries: int = Field(
        default=3, ge=0, le=20, description="Retries of an LLM call after a 5xx, 429 or timeout."
    )
    retry_backoff_seconds: float = Field(default=1.0, ge=0, description="First retry delay.")
    retry_backoff_max_seconds: float = Field(default=30.0, ge=0)
    completion_retries: int = Field(
        default=2, ge=0, le=20, description="Retries of the completion callback."
    )
    completion_timeout_seconds: float = Field(default=30.0, gt=0)
    max_connections: int = Field(default=100, ge=1)


class ServerSettings(_EnvSettings):
    """Limits of the rollout server (env prefix ``OSMOSIS_ROLLOUT_SERVER_``)."""

    env_prefix: ClassVar[str] = "OSMOSIS_ROLLOUT_SERVER_"

    max_concurrent_rollouts: int = Field(
        default=100, ge=1, description="Agent loops running at once; the rest wait in a queue."
    )
    max_pending_rollouts: int = Field(
        default=1000,
        ge=1,
        description="Admitted rollouts not yet finished (running + queued + delivering); "
        "beyond it an init is answered 429 with Retry-After.",
    )
    record_ttl_seconds: float = Field(
        default=3600.0, gt=0, description="How long finished rollouts are remembered."
    )
    request_timeout_seconds: float = Field(
        default=600.0, gt=0, description="Longest an agent loop may run before it is errored."
    )
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    shutdown_grace_seconds: float = Field(
        default=30.0, ge=0, description="On shutdown, how long running loops may still finish."
    )
    retry_after_seconds: int = Field(default=5, ge=1, description="Retry-After sent with 429.")
    max_finished_records: int = Field(
        default=10_000, ge=1,
        description="Finished rollouts remembered at most (oldest forgotten first).",
    )
    max_finished_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1,
        description="Most bytes of finished results (as JSON) remembered; oldest forgotten first.",
    )
    body_read_timeout_seconds: float = Field(
        default=30.0, gt=0,
        description="Longest a client may take to send a request body (then 408).",
    )
    allowed_callback_hosts: list[str] | None = Field(
        default=None,
        description="Hosts, IPs or CIDR ranges that server_url may name (comma-separated in the "
        "environment). The address an init comes from is always allowed. None: any host.",
    )

    @field_validator("allowed_callback_hosts", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [h.strip() for h in v.split(",") if h.strip()]
        return v
