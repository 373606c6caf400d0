"""Framework adapters: keep your Strands or OpenAI Agents code, train it with osmosis.

::

    from osmosis_integrations import OsmosisRolloutModel, OsmosisStrandsAgent   # Strands
    from osmosis_integrations import OsmosisRolloutModel, OsmosisAgent          # OpenAI Agents

``OsmosisRolloutModel(**sampling_params)`` stands where the model goes; the agent classes are the
frameworks' own ``Agent`` classes whose model resolves to the policy of the current rollout
sample and which record their sample for the grader and the trainer.

Importing this package imports no agent framework: each adapter is loaded on first access, and
a missing framework raises :class:`~osmosis_ai.errors.MissingExtraError` naming the
``pip install "osmosis-ai[...]"`` command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from osmosis_ai.errors import MissingExtraError
from osmosis_integrations._placeholder import POLICY_MODEL_NAME, OsmosisRolloutModel

if TYPE_CHECKING:
    from osmosis_integrations._openai_agents import (
        OsmosisAgent,
        OsmosisModelProvider,
        osmosis_run_config,
    )
    from osmosis_integrations._strands import OsmosisStrandsAgent

__all__ = [
    "POLICY_MODEL_NAME",
    "OsmosisAgent",
    "OsmosisModelProvider",
    "OsmosisRolloutModel",
    "OsmosisStrandsAgent",
    "osmosis_run_config",
]

# name -> (module, framework package, extra)
_LAZY: dict[str, tuple[str, str, str]] = {
    "OsmosisStrandsAgent": ("osmosis_integrations._strands", "strands", "strands"),
    "OsmosisAgent": ("osmosis_integrations._openai_agents", "agents", "openai-agents"),
    "OsmosisModelProvider": ("osmosis_integrations._openai_agents", "agents", "openai-agents"),
    "osmosis_run_config": ("osmosis_integrations._openai_agents", "agents", "openai-agents"),
}


def __getattr__(name: str) -> Any:
    try:
        module_name, framework, extra = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'osmosis_integrations' has no attribute {name!r}") from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or ""
        if missing.split(".")[0] in {framework, "openai"}:
            raise MissingExtraError(name, extra, missing.split(".")[0]) from exc
        raise
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
