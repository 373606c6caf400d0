"""osmosis: reinforcement learning for LLM agents you already wrote.

The core package is deliberately light: importing it pulls in neither torch nor any agent
framework. Users import the rollout API from :mod:`osmosis_ai.rollout`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from osmosis_ai._lazy import lazy_attributes
from osmosis_ai.errors import OsmosisError

if TYPE_CHECKING:
    from osmosis_ai.rewards import osmosis_reward, osmosis_rubric
    from osmosis_ai.rubric import (
        MissingAPIKeyError,
        ModelNotFoundError,
        ProviderRequestError,
        RubricResult,
        evaluate_rubric,
    )

__version__ = "0.4.0.dev0"

__all__ = [
    "MissingAPIKeyError",
    "ModelNotFoundError",
    "OsmosisError",
    "ProviderRequestError",
    "RubricResult",
    "__version__",
    "evaluate_rubric",
    "osmosis_reward",
    "osmosis_rubric",
]

# osmosis-ai 0.2/0.3 top-level names, loaded on first use (``import osmosis_ai`` stays light).
_LAZY = {
    "MissingAPIKeyError": "osmosis_ai.rubric",
    "ModelNotFoundError": "osmosis_ai.rubric",
    "ProviderRequestError": "osmosis_ai.rubric",
    "RubricResult": "osmosis_ai.rubric",
    "evaluate_rubric": "osmosis_ai.rubric",
    "osmosis_reward": "osmosis_ai.rewards",
    "osmosis_rubric": "osmosis_ai.rewards",
}


__getattr__ = lazy_attributes(__name__, _LAZY)
