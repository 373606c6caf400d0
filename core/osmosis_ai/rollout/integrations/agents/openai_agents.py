"""osmosis-ai 0.3's OpenAI Agents integration path.

``OsmosisAgent`` is the same class as ``osmosis_integrations.OsmosisAgent``;
``OsmosisRolloutModel`` here is also an Agents ``Model``; ``OsmosisMemorySession`` holds the
Runner's conversation. Needs ``pip install "osmosis-ai[openai-agents]"``.
"""

from __future__ import annotations

from osmosis_ai.errors import MissingExtraError

try:
    from osmosis_integrations._openai_agents03 import (
        OsmosisAgent,
        OsmosisLitellmModel,
        OsmosisMemorySession,
        OsmosisRolloutModel,
        SessionSampleSource,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    if (exc.name or "").split(".")[0] not in {"agents", "openai"}:
        raise
    raise MissingExtraError(
        "The OpenAI Agents integration", "openai-agents", "openai-agents"
    ) from exc

__all__ = [
    "OsmosisAgent",
    "OsmosisLitellmModel",
    "OsmosisMemorySession",
    "OsmosisRolloutModel",
    "SessionSampleSource",
]
