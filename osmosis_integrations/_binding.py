"""How an adapter agent finds its rollout and its sample id.

Two shapes, one per framework idiom:

- :class:`AgentBinding` (Strands): a Strands ``Agent`` holds its conversation, so it belongs to
  exactly one rollout. It binds when built inside a rollout (or on its first call in one); use
  in any other rollout raises :class:`~osmosis_ai.errors.AgentReuseError`.
- :class:`PerRolloutSamples` (OpenAI Agents): an Agents SDK ``Agent`` is a stateless definition
  that is usually built once at module level and run many times, so it gets one sample per
  rollout it runs in, created on first use in that rollout.

Both claim the sample id from the scope (the agent's name, or ``"main"``) and register a sample
source that the runner asks for the sample when the workflow returns.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from osmosis_ai.errors import AgentReuseError
from osmosis_ai.rollout.scope import (
    PolicyRoute,
    RolloutScope,
    SampleSource,
    current_rollout,
    get_rollout_scope,
)

__all__ = ["AgentBinding", "PerRolloutSamples"]

S = TypeVar("S", bound=SampleSource)


class AgentBinding:
    """Ties one stateful agent to one sample of one rollout."""

    def __init__(self, what: str, preferred_id: str, source: SampleSource) -> None:
        self.what = what
        self.preferred_id = preferred_id
        self.source = source
        self.scope: RolloutScope | None = None
        self.sample_id: str | None = None
        self._lock = threading.Lock()
        scope = get_rollout_scope()
        if scope is not None:
            self._bind(scope)

    def _bind(self, scope: RolloutScope) -> None:
        sample_id = scope.claim_sample_id(self.preferred_id)
        scope.register_sample_source(sample_id, self.source)
        self.scope, self.sample_id = scope, sample_id

    def resolve(self) -> tuple[RolloutScope, str]:
        """The bound rollout and sample id; binds on first use inside a rollout.

        Raises:
            NotInRolloutError: outside a rollout.
            AgentReuseError: inside a different rollout than the one the agent belongs to.
        """
        scope = current_rollout(self.what)
        with self._lock:
            if self.scope is None:
                self._bind(scope)
            elif self.scope is not scope:
                raise AgentReuseError(
                    f"{self.what} belongs to rollout {self.scope.rollout_id!r} (sample "
                    f"{self.sample_id!r}) but was used in rollout {scope.rollout_id!r}. An agent "
                    "holds one rollout's conversation: build a new agent inside "
                    "AgentWorkflow.run() for every rollout instead of sharing one."
                )
            assert self.sample_id is not None
            return scope, self.sample_id

    def route(self) -> PolicyRoute:
        scope, sample_id = self.resolve()
        return scope.route(sample_id)


class PerRolloutSamples(Generic[S]):
    """One sample (and one recorder) per rollout a stateless agent definition runs in."""

    def __init__(self, preferred_id: str, make_source: Callable[[], S]) -> None:
        self.preferred_id = preferred_id
        self._make_source = make_source
        self._lock = threading.Lock()
        self._by_scope: weakref.WeakKeyDictionary[RolloutScope, tuple[str, S]] = (
            weakref.WeakKeyDictionary()
        )
        scope = get_rollout_scope()
        if scope is not None:
            self.for_scope(scope)

    def for_scope(self, scope: RolloutScope) -> tuple[str, S]:
        """The sample id and source of this agent in ``scope`` (claimed on first use)."""
        with self._lock:
            entry = self._by_scope.get(scope)
            if entry is None:
                sample_id = scope.claim_sample_id(self.preferred_id)
                source = self._make_source()
                scope.register_sample_source(sample_id, source)
                entry = (sample_id, source)
                self._by_scope[scope] = entry
            return entry

    def resolve(self, what: str) -> tuple[RolloutScope, str, S]:
        """The current rollout with this agent's sample id and source there."""
        scope = current_rollout(what)
        sample_id, source = self.for_scope(scope)
        return scope, sample_id, source
