"""The ambient rollout scope: which rollout is running, and where its policy calls go.

The runner opens one :class:`RolloutScope` per rollout (one workflow run for one dataset row and
sample index) and makes it current in a ContextVar for the duration of ``workflow.run``. Every
policy call made inside it goes to a URL scoped to ``(rollout_id, sample_id)``, so the policy
endpoint (the gateway) records each call against the right sample without trusting the agent
framework to forward ids. Framework adapters read the scope to resolve the placeholder model and
to register the samples they build.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from osmosis_ai.errors import NotInRolloutError
from osmosis_ai.rollout._types import LLMCall, RolloutSample

__all__ = [
    "DEFAULT_SAMPLE_ID",
    "PolicyEndpoint",
    "PolicyRoute",
    "RolloutScope",
    "SampleSource",
    "current_rollout",
    "get_rollout_scope",
    "rollout_scope",
]

DEFAULT_SAMPLE_ID = "main"
_SAMPLE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class PolicyRoute:
    """Where one sample's policy calls go: an OpenAI-compatible base URL ending in ``/v1``."""

    base_url: str
    api_key: str = "osmosis"
    model: str = "osmosis-policy"
    """The model name to send. The gateway rewrites it to the current policy version."""


@runtime_checkable
class PolicyEndpoint(Protocol):
    """Issues per-sample routes and hands back what was recorded on them.

    Implemented by the policy gateway (``osmosis_ai.serving.gateway``) and by test doubles.
    """

    def route(self, rollout_id: str, sample_id: str) -> PolicyRoute:
        """Return the route for one sample of one rollout."""
        ...

    async def collect(self, rollout_id: str) -> dict[str, list[LLMCall]]:
        """Return, and forget, every call recorded for ``rollout_id``, keyed by sample id."""
        ...


class SampleSource(Protocol):
    """Something that can produce a sample when the workflow finishes (an adapter's agent)."""

    def build_sample(self, sample_id: str) -> RolloutSample | Awaitable[RolloutSample]:
        """Return the sample's messages/metrics (or an awaitable of it). ``calls`` are joined in
        by the runner."""
        ...


@dataclass(eq=False)
class RolloutScope:
    """The state of one running rollout. Made current by :func:`rollout_scope`."""

    rollout_id: str
    endpoint: PolicyEndpoint
    label: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    row_index: int = 0
    sample_index: int = 0
    n_samples: int = 1
    sources: dict[str, SampleSource] = field(default_factory=dict)
    _claimed: set[str] = field(default_factory=set)

    def route(self, sample_id: str = DEFAULT_SAMPLE_ID) -> PolicyRoute:
        """The policy route for ``sample_id`` within this rollout."""
        return self.endpoint.route(self.rollout_id, sample_id)

    def claim_sample_id(self, preferred: str = DEFAULT_SAMPLE_ID) -> str:
        """Reserve a sample id unique within this rollout (``agent``, ``agent-2``, ...)."""
        base = _sanitize(preferred)
        candidate, n = base, 1
        while candidate in self._claimed:
            n += 1
            candidate = f"{base}-{n}"
        self._claimed.add(candidate)
        return candidate

    def register_sample_source(self, sample_id: str, source: SampleSource) -> None:
        """Register the object that will build sample ``sample_id`` when the workflow ends."""
        if sample_id in self.sources:
            raise ValueError(
                f"sample id {sample_id!r} already has a sample source in rollout "
                f"{self.rollout_id!r}; use one agent per sample"
            )
        self._claimed.add(sample_id)
        self.sources[sample_id] = source


def _sanitize(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", name.strip()).strip("-.") or DEFAULT_SAMPLE_ID
    cleaned = cleaned[:100]
    return cleaned if _SAMPLE_ID_RE.match(cleaned) else DEFAULT_SAMPLE_ID


_CURRENT: ContextVar[RolloutScope | None] = ContextVar("osmosis_rollout_scope", default=None)

_HOW_TO_RUN = (
    "It only works inside a rollout. Run your workflow through osmosis: "
    "'osmosis eval run configs/eval/<name>.toml' to evaluate it, or "
    "'osmosis train submit configs/training/<name>.toml' to train on it "
    "(in tests, use osmosis_ai.rollout.RolloutRunner)."
)


def get_rollout_scope() -> RolloutScope | None:
    """The current rollout scope, or ``None`` outside a rollout."""
    return _CURRENT.get()


def current_rollout(what: str = "This call") -> RolloutScope:
    """The current rollout scope; raises :class:`NotInRolloutError` outside a rollout."""
    scope = _CURRENT.get()
    if scope is None:
        raise NotInRolloutError(f"{what} was used outside a rollout. {_HOW_TO_RUN}")
    return scope


@contextmanager
def rollout_scope(scope: RolloutScope) -> Iterator[RolloutScope]:
    """Make ``scope`` current for the body of the ``with`` block."""
    token = _CURRENT.set(scope)
    try:
        yield scope
    finally:
        _CURRENT.reset(token)
