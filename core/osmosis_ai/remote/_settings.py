"""Settings of the remote-rollout client (LLM calls, callbacks) and server (limits).

Each field can be set from the environment: ``OSMOSIS_ROLLOUT_CLIENT_<FIELD>`` and
``OSMOSIS_ROLLOUT_SERVER_<FIELD>`` (upper case), e.g. ``OSMOSIS_ROLLOUT_SERVER_MAX_CONCURRENT_ROLLOUTS=20``.
Precedence: an ``osmosis serve`` option (``--max-body-bytes``, ``--allowed-callback-host``) or a
value passed in code, then the environment, then the default written here.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from osmosis_ai.errors import ConfigError

__all__ = ["ClientSettings", "ServerSettings"]

_T = TypeVar("_T", bound="_EnvSettings")


class _EnvSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    env_prefix: ClassVar[str] = ""

    @classmethod
    def from_env(
        cls: type[_T],
        environ: Mapping[str, str] | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> _T:
        """Build from defaults, then ``OSMOSIS_ROLLOUT_*`` variables, then ``overrides``
        (``None`` values are skipped). ``labels`` names where an override came from (e.g.
        ``{"max_body_bytes": "--max-body-bytes"}``) for the error message."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        prefix = cls.env_prefix
        for name in cls.model_fields:
            key = prefix + name.upper()
            if key in env:
                values[name] = env[key]
        given = {k: v for k, v in overrides.items() if v is not None}
        values.update(given)
        try:
            return cls(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else ""
            source = (labels or {}).get(field, field) if field in given else prefix + field.upper()
            msg = str(first["msg"]).removeprefix("Value error, ")
            raise ConfigError(f"invalid {cls.__name__} value for {source}: {msg}") from exc

    def to_env(self) -> dict[str, str]:
        """The variables :meth:`from_env` reads back into these values (``None`` fields left
        out): how a settings object reaches a child process."""
        env: dict[str, str] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is not None:
                env[self.env_prefix + name.upper()] = (
                    ",".join(value) if isinstance(value, list) else str(value)
                )
        return env


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
    max_body_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024,
        description="Largest request body in bytes; a larger one is answered 413 unread "
        "(osmosis serve --max-body-bytes).",
    )
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
        description="Hosts, IPs or CIDR ranges that server_url may name (osmosis serve "
        "--allowed-callback-host, repeatable; comma-separated in the environment). The address "
        "an init comes from is always allowed. None: any host.",
    )

    @field_validator("allowed_callback_hosts", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [h.strip() for h in v.split(",") if h.strip()]
        return v

    @field_validator("allowed_callback_hosts")
    @classmethod
    def _hosts(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return None
        hosts = [h.strip().lower().strip("[]") for h in v]
        for host in hosts:
            # A URL or host:port never equals a callback's host: it would refuse every callback.
            if not host or (("/" in host or ":" in host) and not _is_ip_or_network(host)):
                raise ValueError(
                    f"{host!r} is not a host name, an IP address or a CIDR range "
                    "(e.g. trainer.internal, 10.0.0.5, 10.0.0.0/8; no scheme or port)"
                )
        return hosts


def _is_ip_or_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True
