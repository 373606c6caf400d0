"""osmosis-ai 0.3's Strands integration path: ``OsmosisStrandsAgent``, ``OsmosisRolloutModel``.

The same ``OsmosisStrandsAgent`` as ``osmosis_integrations``; ``OsmosisRolloutModel`` here is
also a Strands ``Model`` (``model: Model`` config fields accept it) and takes
``params={...}``. Needs ``pip install "osmosis-ai[strands]"``.
"""

from __future__ import annotations

from osmosis_ai.errors import MissingExtraError

try:
    from osmosis_integrations._strands03 import OsmosisRolloutModel, OsmosisStrandsAgent
except ImportError as exc:  # pragma: no cover - depends on the environment
    if (exc.name or "").split(".")[0] not in {"strands", "openai"}:
        raise
    raise MissingExtraError("The Strands integration", "strands", "strands-agents") from exc

__all__ = ["OsmosisRolloutModel", "OsmosisStrandsAgent"]
