"""Remote rollout (protocol G1): serve an agent loop that lives in your own service.

The training cluster posts ``/v1/rollout/init``; the server answers 202 with the loop's tools,
runs :meth:`RolloutAgentLoop.run` in the background (LLM calls go back to the cluster's
``/v1/chat/completions``), and posts the result to ``/v1/rollout/completed``.

FastAPI is imported only by :func:`create_app` (``pip install "osmosis-ai[server]"``).
"""

from __future__ import annotations

from osmosis_ai.remote._admission import AdmissionError
from osmosis_ai.remote._client import CallbackDeliveryError, ClusterClient
from osmosis_ai.remote._execute import execute_rollout, to_response
from osmosis_ai.remote._loader import coerce_agent_loop, load_agent_loop
from osmosis_ai.remote._loop import (
    RolloutAgentLoop,
    RolloutContext,
    RolloutLimitExceeded,
    normalize_tools,
)
from osmosis_ai.remote._protocol import (
    CompletionParams,
    CompletionsResult,
    InitResponse,
    RolloutMetrics,
    RolloutRecordView,
    RolloutRequest,
    RolloutResponse,
    RolloutResult,
    RolloutStatus,
)
from osmosis_ai.remote._registry import RolloutRegistry
from osmosis_ai.remote._server import API_KEY_ENV, create_app
from osmosis_ai.remote._settings import ClientSettings, ServerSettings
from osmosis_ai.remote._trace import TraceWriter
from osmosis_ai.remote._validate import (
    AgentLoopIssue,
    AgentLoopReport,
    validate_agent_loop,
)

__all__ = [
    "API_KEY_ENV",
    "AdmissionError",
    "AgentLoopIssue",
    "AgentLoopReport",
    "CallbackDeliveryError",
    "ClientSettings",
    "ClusterClient",
    "CompletionParams",
    "CompletionsResult",
    "InitResponse",
    "RolloutAgentLoop",
    "RolloutContext",
    "RolloutLimitExceeded",
    "RolloutMetrics",
    "RolloutRecordView",
    "RolloutRegistry",
    "RolloutRequest",
    "RolloutResponse",
    "RolloutResult",
    "RolloutStatus",
    "ServerSettings",
    "TraceWriter",
    "coerce_agent_loop",
    "create_app",
    "execute_rollout",
    "load_agent_loop",
    "normalize_tools",
    "to_response",
    "validate_agent_loop",
]
