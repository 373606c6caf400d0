"""osmosis-ai 0.3's ``osmosis_ai.rollout.context``: the contexts and the ambient rollout context.

:class:`AgentWorkflowContext` and :class:`GraderContext` are the classes the runner hands to
workflows and graders (``GraderContext.sample`` / ``set_reward`` grade a one-sample rollout).

:class:`RolloutContext` here is 0.3's *ambient* context: where the current rollout's policy
calls go (``chat_completions_url``, ``api_key``) and the one sample source of the rollout. It is
not ``osmosis_ai.rollout.RolloutContext``, which is the remote agent loop's context.

Inside a rollout that osmosis runs, :func:`get_rollout_context` returns a view of that rollout:
its URL is the policy route of the sample ``"main"``, and a source registered with
:meth:`RolloutContext.set_sample_source` becomes that sample. A harness of your own may enter a
``RolloutContext(chat_completions_url=...)`` with ``with``; it then wins over the view.
"""

from __future__ import annotations

import os
import weakref
from abc import ABC, abstractmethod
from contextvars import ContextVar, Token
from dataclasses import dataclass, field

from osmosis_ai.rollout._grader import GraderContext
from osmosis_ai.rollout._types import RolloutSample
from osmosis_ai.rollout._workflow import AgentWorkflowContext
from osmosis_ai.rollout.scope import DEFAULT_SAMPLE_ID, RolloutScope, get_rollout_scope

__all__ = [
    "API_KEY_ENV",
    "CHAT_COMPLETIONS_URL_ENV",
    "ROLLOUT_ID_ENV",
    "AgentWorkflowContext",
    "GraderContext",
    "RolloutContext",
    "SampleSource",
    "get_rollout_context",
]

CHAT_COMPLETIONS_URL_ENV = "OSMOSIS_CHAT_COMPLETIONS_URL"
API_KEY_ENV = "OSMOSIS_API_KEY"
ROLLOUT_ID_ENV = "OSMOSIS_ROLLOUT_ID"


class SampleSource(ABC):
    """Produces a rollout's sample when the workflow ends (0.3's integration hook)."""

    @abstractmethod
    async def get_sample(self) -> RolloutSample:
        """Return the rollout's sample."""


class _ScopeSource:
    """A 0.3 :class:`SampleSource` registered as a sample of an osmosis rollout."""

    def __init__(self, source: SampleSource) -> None:
        self.source = source

    async def build_sample(self, sample_id: str) -> RolloutSample:
        sample = await self.source.get_sample()
        if not isinstance(sample, RolloutSample):
            raise TypeError(
                f"{type(self.source).__name__}.get_sample() returned a "
                f"{type(sample).__name__}, not a RolloutSample"
            )
        return sample.model_copy(update={"id": sample_id})


@dataclass(eq=False)
class RolloutContext:
    """The ambient context of one rollout, as osmosis-ai 0.3 defines it.

    Attributes:
        chat_completions_url: the OpenAI-compatible base URL of the policy for this rollout
            (from ``OSMOSIS_CHAT_COMPLETIONS_URL`` when left empty).
        api_key: the key for that URL (from ``OSMOSIS_API_KEY`` when left empty).
        rollout_id: the rollout id (from ``OSMOSIS_ROLLOUT_ID`` when left empty).
        sample_source: the rollout's one sample source, once registered.
    """

    chat_completions_url: str = ""
    api_key: str | None = field(default=None, repr=False)
    rollout_id: str = ""
    sample_source: SampleSource | None = None
    _scope: RolloutScope | None = field(default=None, repr=False)
    _tokens: list[Token[RolloutContext | None]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not self.chat_completions_url:
            self.chat_completions_url = os.environ.get(CHAT_COMPLETIONS_URL_ENV, "")
        if not self.api_key:
            self.api_key = os.environ.get(API_KEY_ENV)
        if not self.rollout_id:
            self.rollout_id = os.environ.get(ROLLOUT_ID_ENV, "")

    def __enter__(self) -> RolloutContext:
        self._tokens.append(_EXPLICIT.set(self))
        return self

    def __exit__(self, *_: object) -> None:
        _EXPLICIT.reset(self._tokens.pop())

    def set_sample_source(self, source: SampleSource) -> None:
        """Register the rollout's one sample source.

        Raises:
            ValueError: a source is registered already (one agent or session per rollout).
        """
        if self.sample_source is not None:
            raise ValueError(
                "this RolloutContext already has a sample source: a rollout produces one "
                "sample here. Build one agent or session per rollout (several agents: give "
                "each a name and grade ctx.samples)"
            )
        self.sample_source = source
        if self._scope is not None:
            sample_id = self._scope.claim_sample_id(DEFAULT_SAMPLE_ID)
            self._scope.register_sample_source(sample_id, _ScopeSource(source))

    def note_sample_source(self, source: SampleSource) -> None:
        """Hold ``source`` as this rollout's sample source without adding it as a sample.

        For a source whose conversation an osmosis agent already records as its sample (an
        ``OsmosisMemorySession``): :meth:`get_sample` answers from it, and a second one raises
        ``ValueError`` as in 0.3.
        """
        if self.sample_source is not None:
            raise ValueError(
                "this RolloutContext already has a sample source: a rollout produces one "
                "sample here. Build one session per rollout"
            )
        self.sample_source = source

    async def get_sample(self) -> RolloutSample | None:
        """The rollout's sample, or ``None`` when no source was registered."""
        if self.sample_source is None:
            return None
        return await self.sample_source.get_sample()


_EXPLICIT: ContextVar[RolloutContext | None] = ContextVar(
    "osmosis_original_rollout_context", default=None
)
_VIEWS: weakref.WeakKeyDictionary[RolloutScope, RolloutContext] = weakref.WeakKeyDictionary()


def get_rollout_context() -> RolloutContext | None:
    """The current rollout's ambient context, or ``None`` outside a rollout."""
    explicit = _EXPLICIT.get()
    if explicit is not None:
        return explicit
    scope = get_rollout_scope()
    if scope is None:
        return None
    view = _VIEWS.get(scope)
    if view is None:
        route = scope.route(DEFAULT_SAMPLE_ID)
        view = RolloutContext(
            chat_completions_url=route.base_url,
            api_key=route.api_key,
            rollout_id=scope.rollout_id,
            _scope=scope,
        )
        _VIEWS[scope] = view
    return view
