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


# osmosis-ai 0.3 exported these from osmosis_ai.rollout too (its ambient RolloutContext and its
# SampleSource are at osmosis_ai.rollout.context: here those names keep the seeds' meaning).
_ORIGINAL = {
    "BaseConfig": "osmosis_ai.rollout.types",
    "ConcurrencyConfig": "osmosis_ai.rollout.types",
    "ExecutionBackend": "osmosis_ai.rollout.backend",
    "ExecutionRequest": "osmosis_ai.rollout.types",
    "ExecutionResult": "osmosis_ai.rollout.types",
    "LocalBackend": "osmosis_ai.rollout.backend.local",
    "MessageDict": "osmosis_ai.rollout.types",
    "RolloutErrorCategory": "osmosis_ai.rollout.types",
    "RolloutStatus": "osmosis_ai.rollout.types",
    "get_rollout_context": "osmosis_ai.rollout.context",
}


def __getattr__(name: str) -> Any:
    if name in _REMOTE or name in _ORIGINAL:
        module = "osmosis_ai.remote" if name in _REMOTE else _ORIGINAL[name]
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    from osmosis_ai.rollout._moved import WIRE, missing

    raise missing(__name__, name, WIRE)
