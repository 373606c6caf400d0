"""osmosis-ai 0.3's module path for :class:`AgentWorkflow` (the same class as
``osmosis_ai.rollout.AgentWorkflow``)."""

from __future__ import annotations

from osmosis_ai.rollout._types import AgentWorkflowOutput
from osmosis_ai.rollout._workflow import AgentWorkflow, AgentWorkflowContext

__all__ = ["AgentWorkflow", "AgentWorkflowContext", "AgentWorkflowOutput"]
