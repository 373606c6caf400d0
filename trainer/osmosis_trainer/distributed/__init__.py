"""Training on a Ray cluster (``[cluster]`` in the training config).

The trainer process is the Ray driver: it holds the model, the optimizer, the inference engine
and the policy gateway. Rollout workers are Ray actors (:class:`RayBackend`, the rollout runner's
``"ray"`` backend) spread over the cluster's nodes; they run the user's workflows, whose policy
calls come back to the driver's gateway, which records them for training. With
``[cluster] engines > 0`` the gateway's engine is a :class:`RayEnginePool` of engine actors
(sticky per sample; each step's adapter shipped through the object store and confirmed).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from osmosis_trainer.distributed._backend import ClusterStats, RayBackend
    from osmosis_trainer.distributed._cluster import ClusterRolloutSource, connect
    from osmosis_trainer.distributed._engines import RayEnginePool
    from osmosis_trainer.distributed._placement import ClusterPlacement

__all__ = [
    "ClusterPlacement", "ClusterRolloutSource", "ClusterStats", "RayBackend", "RayEnginePool",
    "connect",
]

# Loaded on first use: a rollout worker process imports this package on its way to ``_actor``,
# and ``_cluster`` pulls in the training loop and torch, which a worker never needs (each
# worker would pay ~2 s and a few hundred MB, and one failing to map torch's libraries on a
# loaded node killed a worker before it ran).
_LAZY = {
    "ClusterPlacement": "osmosis_trainer.distributed._placement",
    "ClusterRolloutSource": "osmosis_trainer.distributed._cluster",
    "ClusterStats": "osmosis_trainer.distributed._backend",
    "RayBackend": "osmosis_trainer.distributed._backend",
    "RayEnginePool": "osmosis_trainer.distributed._engines",
    "connect": "osmosis_trainer.distributed._cluster",
}


def __getattr__(name: str) -> Any:
    # Its own hook, not core's private ``osmosis_ai._lazy``: the trainer uses core's public
    # modules only.
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
