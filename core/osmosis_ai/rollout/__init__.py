"""The rollout API: what users import to define and run rollouts.

A rollout is one :class:`AgentWorkflow` (produces samples for a dataset row) plus zero or one
:class:`Grader` (turns samples into rewards, using ``ctx.label``). The rest is for the code that
runs rollouts or serves their policy calls, in modules named for what they do:

- :mod:`osmosis_ai.rollout.running`: the runner, backends, entrypoint loading, outcomes.
- :mod:`osmosis_ai.rollout.scope`: the current rollout, its routes and the endpoint protocol
  (framework adapters and the gateway).

The remote-rollout protocol (an agent loop served from your own service) is a room of its
own, :mod:`osmosis_ai.remote`. Its agent-loop names (``RolloutAgentLoop``, ``RolloutContext``,
``RolloutRequest``, ``RolloutResult``, ``create_app``) also import from here, where the
original SDK's docs import them; they load on first use, so ``import osmosis_ai.rollout``
stays light. The remote room never imports this one (shared chat types live in
:mod:`osmosis_ai.chat`), so the re-export is one arrow, not a circle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from osmosis_ai.rollout._grader import Grader, GraderContext
from osmosis_ai.rollout._types import (
    AgentWorkflowOutput,
    ChatResult,
    ErrorCategory,
    LLMCall,
    Message,
    RolloutSample,
    SampleError,
    SampleStatus,
    ToolCall,
)
from osmosis_ai.rollout._workflow import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    GraderConfig,
)

if TYPE_CHECKING:
    from osmosis_ai.remote import (
        RolloutAgentLoop,
        RolloutContext,
        RolloutRequest,
        RolloutResult,
        create_app,
    )

_REMOTE = frozenset(
    {"RolloutAgentLoop", "RolloutContext", "RolloutRequest", "RolloutResult", "create_app"}
)

__all__ = [
    "AgentWorkflow",
    "AgentWorkflowConfig",
    "AgentWorkflowContext",
    "AgentWorkflowOutput",
    "ChatResult",
    "ErrorCategory",
    "Grader",
    "GraderConfig",
    "GraderContext",
    "LLMCall",
    "Message",
    "RolloutAgentLoop",
    "RolloutContext",
    "RolloutRequest",
    "RolloutResult",
    "RolloutSample",
    "SampleError",
    "SampleStatus",
    "ToolCall",
    "create_app",
]


def __getattr__(name: str) -> Any:
    if name in _REMOTE:
        value = getattr(importlib.import_module("osmosis_ai.remote"), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
