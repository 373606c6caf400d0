"""Joining the Ray cluster named by ``[cluster]`` and the rollout source that reports on it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from osmosis_ai.config import TrainingConfig
from osmosis_ai.errors import TrainingError
from osmosis_trainer.distributed._backend import RayBackend
from osmosis_trainer.distributed._engines import RayEnginePool
from osmosis_trainer.loop._rollouts import StepRollouts
from osmosis_trainer.loop._source import GatewayRolloutSource

__all__ = ["ClusterRolloutSource", "connect"]


@contextlib.contextmanager
def connect(config: TrainingConfig) -> Iterator[dict[str, Any]]:
    """Join the cluster of ``[cluster] address`` for the block; yields its resources."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the ray extra is missing
        raise TrainingError(
            "[cluster] address is set but Ray is not installed: pip install 'osmosis-ai[ray]'"
        ) from exc
    address = config.cluster.address
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True,
                 ignore_reinit_error=True)
    except Exception as exc:
        raise TrainingError(
            f"[cluster] address = {address!r}: could not join the Ray cluster ({exc}). Start "
            "it first (`ray start --head` on the head node, `ray start --address HEAD:6379` on "
            "the others), or remove [cluster] to train in one process."
        ) from exc
    try:
        yield dict(ray.cluster_resources())  # type: ignore[no-untyped-call,unused-ignore]  # typed only where ray is installed
    finally:
        ray.shutdown()


class ClusterRolloutSource(GatewayRolloutSource):
    """The gateway rollout source with the cluster's state in every step's metrics.

    ``cluster_workers``/``cluster_workers_lost``/``cluster_retries`` (rollouts restarted this
    step), and with engine actors ``cluster_engines``/``cluster_engines_lost`` and
    ``adapter_sync_s`` (the last adapter shipped to every engine, confirmed).
    """

    def __init__(
        self, *args: Any, backend: RayBackend, engines: RayEnginePool | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.backend = backend
        self.engines = engines
        self.on_workers_lost: Any = None
        self._lost_seen = 0

    async def collect(
        self, rows: Sequence[Any], *, step: int, n_samples: int | None = None
    ) -> StepRollouts:
        retries = self.backend.stats.retries
        out = await super().collect(rows, step=step, n_samples=n_samples)
        out.metrics.update(self.backend.stats.metrics(self.backend.workers_alive))
        out.metrics["cluster_retries"] = float(self.backend.stats.retries - retries)
        lost = self.backend.stats.workers_lost
        if self.engines is not None:
            out.metrics["cluster_engines"] = float(self.engines.engines_alive)
            out.metrics["cluster_engines_lost"] = float(self.engines.engines_lost)
            if self.engines.sync_times_s:
                out.metrics["adapter_sync_s"] = self.engines.sync_times_s[-1]
            lost += self.engines.engines_lost
        if lost != self._lost_seen and self.on_workers_lost is not None:
            self._lost_seen = lost
            self.on_workers_lost(self.backend)
        return out
