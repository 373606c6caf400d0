"""Training on a Ray cluster (``[cluster]`` in the training config).

The trainer process is the Ray driver: it holds the model, the optimizer, the inference engine
and the policy gateway. Rollout workers are Ray actors (:class:`RayBackend`, the rollout runner's
``"ray"`` backend) spread over the cluster's nodes; they run the user's workflows, whose policy
calls come back to the driver's gateway, which records them for training. With
``[cluster] engines > 0`` the gateway's engine is a :class:`RayEnginePool` of engine actors
(sticky per sample; each step's adapter shipped through the object store and confirmed).
"""

from __future__ import annotations

from osmosis_trainer.distributed._backend import ClusterStats, RayBackend
from osmosis_trainer.distributed._cluster import ClusterRolloutSource, connect
from osmosis_trainer.distributed._engines import RayEnginePool
from osmosis_trainer.distributed._placement import ClusterPlacement

__all__ = [
    "ClusterPlacement", "ClusterRolloutSource", "ClusterStats", "RayBackend", "RayEnginePool",
    "connect",
]
