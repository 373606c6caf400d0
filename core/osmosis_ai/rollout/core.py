"""osmosis-ai 0.2's ``osmosis_ai.rollout.core``: the remote agent-loop names, from
:mod:`osmosis_ai.remote` (the same objects). 0.2's tool-schema pydantic classes are not kept:
tools are plain OpenAI function-tool dicts here (``osmosis_ai.remote.normalize_tools`` checks
them); asking for one says so."""

from __future__ import annotations

from osmosis_ai.errors import OsmosisError
from osmosis_ai.remote import (
    CompletionsResult,
    InitResponse,
    RolloutAgentLoop,
    RolloutContext,
    RolloutMetrics,
    RolloutRequest,
    RolloutResponse,
    RolloutResult,
    RolloutStatus,
)
from osmosis_ai.rollout.tools import ToolArgumentError, ToolExecutionError
from osmosis_ai.rollout.types import MessageDict

__all__ = [
    "CompletionsResult",
    "InitResponse",
    "MessageDict",
    "OsmosisRolloutError",
    "RolloutAgentLoop",
    "RolloutContext",
    "RolloutMetrics",
    "RolloutRequest",
    "RolloutResponse",
    "RolloutResult",
    "RolloutStatus",
    "ToolArgumentError",
    "ToolExecutionError",
]

OsmosisRolloutError = OsmosisError
"""0.2's root of rollout errors: osmosis's one root, :class:`~osmosis_ai.errors.OsmosisError`."""

_SCHEMA_NOTE = (
    "was one of osmosis-ai 0.2's tool-schema classes. Tools are plain OpenAI function-tool dicts "
    "here ({'type': 'function', 'function': {'name', 'description', 'parameters'}}): return "
    "them from get_tools(); osmosis_ai.remote.normalize_tools validates them"
)
_CLIENT_NOTE = (
    "was an error of osmosis-ai 0.2's LLM client. Policy calls fail with "
    "osmosis_ai.errors.PolicyCallError (status and body on the exception)"
)
_MOVED = {
    **dict.fromkeys(
        (
            "OpenAIFunctionToolSchema",
            "OpenAIFunctionSchema",
            "OpenAIFunctionParametersSchema",
            "OpenAIFunctionPropertySchema",
            "OpenAIFunctionParsedSchema",
            "OpenAIFunctionCallSchema",
            "OpenAIFunctionToolCall",
        ),
        _SCHEMA_NOTE,
    ),
    **dict.fromkeys(
        ("OsmosisServerError", "OsmosisTimeoutError", "OsmosisTransportError"), _CLIENT_NOTE
    ),
    "OsmosisLLMClient": "was osmosis-ai 0.2's LLM client; call the policy with "
    "RolloutContext.chat(messages) (osmosis_ai.remote)",
}


def __getattr__(name: str) -> object:
    from osmosis_ai.rollout._moved import missing

    raise missing(__name__, name, _MOVED)
