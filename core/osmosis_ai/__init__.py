"""osmosis: reinforcement learning for LLM agents you already wrote.

The core package is deliberately light: importing it pulls in neither torch nor any agent
framework. Users import the rollout API from :mod:`osmosis_ai.rollout`.
"""

from __future__ import annotations

from osmosis_ai.errors import OsmosisError

__version__ = "0.4.0.dev0"

__all__ = ["OsmosisError", "__version__"]
