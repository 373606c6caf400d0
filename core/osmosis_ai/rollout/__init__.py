"""The rollout API: what users import to define and run rollouts.

A rollout is one :class:`AgentWorkflow` (produces samples for a dataset row) plus zero or one
:class:`Grader` (turns samples into rewards, using ``ctx.label``). The rest is for the code that
runs rollouts or serves their policy calls, in modules named for what they do:

- :mod:`osmosis_ai.rollout.running`: the runner, backends, entrypoint loading, outcomes.
- :mod:`osmosis_ai.rollout.scope`: the current rollout, its routes and the endpoint protocol
  (framework adapters and the gateway).
- :mod:`osmosis_ai.rollout.remote`: serving a workflow as a remote rollout server.
"""

from __future__ import annotations

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
    "RolloutSample",
    "SampleError",
    "SampleStatus",
    "ToolCall",
]
