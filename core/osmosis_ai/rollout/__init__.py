"""The rollout API: what users import to define and run rollouts.

A rollout is one :class:`AgentWorkflow` (produces samples for a dataset row) plus zero or one
:class:`Grader` (turns samples into rewards, using ``ctx.label``).
"""

from __future__ import annotations

from osmosis_ai.rollout._backends import Backend, LocalBackend, ProcessBackend
from osmosis_ai.rollout._discovery import Entrypoint, load_entrypoint
from osmosis_ai.rollout._execution import WorkflowRequest, WorkflowRun
from osmosis_ai.rollout._grader import Grader, GraderContext
from osmosis_ai.rollout._outcome import RolloutGroup, RolloutOutcome, classify_exception
from osmosis_ai.rollout._runner import RolloutRunner
from osmosis_ai.rollout._scope import (
    DEFAULT_SAMPLE_ID,
    PolicyEndpoint,
    PolicyRoute,
    RolloutScope,
    SampleSource,
    current_rollout,
    get_rollout_scope,
    rollout_scope,
)
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
    BaseConfig,
    ConcurrencyConfig,
    GraderConfig,
    WorkflowResult,
)
from osmosis_ai.rollout.remote import (
    InitResponse,
    RolloutAgentLoop,
    RolloutContext,
    RolloutLimitExceeded,
    RolloutMetrics,
    RolloutRequest,
    RolloutResponse,
    RolloutResult,
    RolloutStatus,
    create_app,
)

__all__ = [
    # remote rollout (protocol G1), see osmosis_ai.rollout.remote
    "InitResponse",
    "RolloutAgentLoop",
    "RolloutContext",
    "RolloutLimitExceeded",
    "RolloutMetrics",
    "RolloutRequest",
    "RolloutResponse",
    "RolloutResult",
    "RolloutStatus",
    "create_app",
    "DEFAULT_SAMPLE_ID",
    "AgentWorkflow",
    "AgentWorkflowConfig",
    "AgentWorkflowContext",
    "AgentWorkflowOutput",
    "Backend",
    "BaseConfig",
    "ChatResult",
    "ConcurrencyConfig",
    "Entrypoint",
    "ErrorCategory",
    "Grader",
    "GraderConfig",
    "GraderContext",
    "LLMCall",
    "LocalBackend",
    "Message",
    "PolicyEndpoint",
    "PolicyRoute",
    "ProcessBackend",
    "RolloutGroup",
    "RolloutOutcome",
    "RolloutRunner",
    "RolloutSample",
    "RolloutScope",
    "SampleError",
    "SampleSource",
    "SampleStatus",
    "ToolCall",
    "WorkflowRequest",
    "WorkflowResult",
    "WorkflowRun",
    "classify_exception",
    "current_rollout",
    "get_rollout_scope",
    "load_entrypoint",
    "rollout_scope",
]
