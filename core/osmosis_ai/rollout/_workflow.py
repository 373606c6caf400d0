"""The user's half of a rollout: :class:`AgentWorkflow` and the context it runs with."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from osmosis_ai.errors import MissingExtraError
from osmosis_ai.rollout._chat import chat_completion
from osmosis_ai.rollout._types import AgentWorkflowOutput, ChatResult, Message
from osmosis_ai.rollout.scope import (
    DEFAULT_SAMPLE_ID,
    PolicyRoute,
    RolloutScope,
    current_rollout,
    get_rollout_scope,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = [
    "AgentWorkflow",
    "AgentWorkflowConfig",
    "AgentWorkflowContext",
    "BaseConfig",
    "ConcurrencyConfig",
    "GraderConfig",
    "WorkflowResult",
]


class ConcurrencyConfig(BaseModel):
    max_concurrent: int | None = Field(default=None, ge=1)


class BaseConfig(BaseModel):
    """Base of user configs for workflows and graders (extra fields allowed)."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    name: str
    description: str | None = None


class AgentWorkflowConfig(BaseConfig):
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)


class GraderConfig(BaseConfig):
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)


TConfig = TypeVar("TConfig")

WorkflowResult = AgentWorkflowOutput | list[Message] | None
"""What ``AgentWorkflow.run`` may return: the main sample's messages (or an output object), or
``None`` when the framework adapters registered the samples themselves."""


@dataclass(eq=False)
class AgentWorkflowContext(Generic[TConfig]):
    """What a workflow gets for one rollout.

    Attributes:
        prompt: the row's chat messages (``system_prompt`` then ``user_prompt``).
        metadata: the row's other columns.
        config: a per-rollout deep copy of the workflow config, if any.
        rollout_id: unique id of this rollout.
        row_index: the row's position in the selected dataset.
        sample_index: which of the row's ``n_samples`` rollouts this is.
        n_samples: how many rollouts (samples) are wanted for this row (the GRPO group size).
        artifacts_dir: a private folder for files this rollout writes, if one could be made.

    The runner builds it. Built by hand (a unit test, osmosis-ai 0.3's
    ``AgentWorkflowContext(prompt=..., config=..., metadata=...)``), ``metadata`` may be left out
    or ``None`` (read as ``{}``) and the scope is the current rollout's, if any.
    """

    prompt: list[Message]
    metadata: dict[str, Any] = field(default_factory=dict)
    scope: RolloutScope | None = field(default=None, repr=False)
    config: TConfig | None = None
    rollout_id: str = ""
    row_index: int = 0
    sample_index: int = 0
    n_samples: int = 1
    artifacts_dir: Path | None = None
    sampling: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.metadata, dict):
            self.metadata = dict(self.metadata or {})
        if self.scope is None:
            self.scope = get_rollout_scope()

    def _rollout(self) -> RolloutScope:
        return self.scope if self.scope is not None else current_rollout("AgentWorkflowContext")

    def route(self, sample_id: str = DEFAULT_SAMPLE_ID) -> PolicyRoute:
        """The OpenAI-compatible route of the current policy for ``sample_id``."""
        return self._rollout().route(sample_id)

    async def chat(
        self,
        messages: list[Message] | None = None,
        *,
        tools: list[dict[str, Any]] | None = None,
        sample_id: str = DEFAULT_SAMPLE_ID,
        **params: Any,
    ) -> ChatResult:
        """Call the current policy once, with no framework. ``messages`` defaults to the prompt.

        Extra keyword arguments (``temperature``, ``max_tokens``, ``stop`` ...) are sent as-is;
        in training, the gateway enforces the run's sampling settings over them.
        """
        self._rollout()._claimed.add(sample_id)
        return await chat_completion(
            self.route(sample_id), list(messages if messages is not None else self.prompt),
            tools=tools, **{**self.sampling, **params},
        )

    def openai_client(self, sample_id: str = DEFAULT_SAMPLE_ID) -> AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` client bound to this rollout's policy route.

        Pass ``model=ctx.route().model`` (any name works; the gateway rewrites it).
        """
        try:
            from openai import AsyncOpenAI
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise MissingExtraError("ctx.openai_client()", "openai-agents", "openai") from exc
        self._rollout()._claimed.add(sample_id)
        route = self.route(sample_id)
        return AsyncOpenAI(base_url=route.base_url, api_key=route.api_key, max_retries=3)


class AgentWorkflow(ABC, Generic[TConfig]):
    """One rollout's behaviour: turn a prompt into one or more samples.

    Subclass it, implement :meth:`run`, and put it in ``rollouts/<name>/main.py``. A fresh
    instance is built for every rollout from a deep copy of the config.
    """

    def __init__(self, config: TConfig | None = None) -> None:
        self.config = config

    @abstractmethod
    async def run(self, ctx: AgentWorkflowContext[TConfig]) -> WorkflowResult:
        """Run the agent for one rollout.

        Return the main sample's messages (a list or :class:`AgentWorkflowOutput`), or ``None``
        when the samples come from framework adapters (``OsmosisStrandsAgent``, ``OsmosisAgent``).
        """
