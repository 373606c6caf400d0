"""Where engines and rollout workers run: Ray placement groups, not a scheduler of our own.

Each inference engine forms an *engine set* with the rollout workers routed to it: the set is
one bundle of a placement group (``{"CPU": engine + its workers, "GPU": engine_gpus}``). Ray
never splits a bundle across nodes, so a set is packed on one node (what ``STRICT_PACK``
gives a group of bundles), and the workflows' policy calls stay on their node. The group's
strategy spreads the sets: ``STRICT_SPREAD`` (one set per node) when the cluster has at least
as many live nodes as engines, else ``SPREAD`` (best effort). Worker ``j`` belongs to engine
``j % engines``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ClusterPlacement"]


@dataclass(frozen=True)
class _Set:
    engine: int
    workers: tuple[int, ...]


class ClusterPlacement:
    """A placement group of one bundle per engine set (see the module docstring).

    Args:
        engines: inference engine actors (one set each); at least 1.
        workers: rollout worker actors, shared out round-robin.
        engine_cpus / engine_gpus / worker_cpus: resources of each actor.
        strategy: the group's strategy; ``None`` picks ``STRICT_SPREAD`` when there are
            enough live nodes, else ``SPREAD``.
    """

    def __init__(
        self, *, engines: int, workers: int, engine_cpus: float = 1.0, engine_gpus: float = 0.0,
        worker_cpus: float = 1.0, strategy: str | None = None,
    ) -> None:
        if engines < 1:
            raise ValueError(f"a placement needs at least one engine, got {engines}")
        self.engines = engines
        self.engine_cpus, self.engine_gpus, self.worker_cpus = engine_cpus, engine_gpus, worker_cpus
        self.sets = [_Set(e, tuple(range(e, workers, engines))) for e in range(engines)]
        self.strategy = strategy
        self._pg: Any = None

    def engine_of(self, worker: int) -> int:
        """The engine worker ``worker`` sends its samples' calls to (the one on its node)."""
        return worker % self.engines

    def bundles(self) -> list[dict[str, float]]:
        out = []
        for s in self.sets:
            bundle = {"CPU": self.engine_cpus + len(s.workers) * self.worker_cpus}
            if self.engine_gpus > 0:
                bundle["GPU"] = self.engine_gpus
            out.append(bundle)
        return out

    async def ready(self) -> None:
        """Reserve the group (waits until the cluster has room for every set)."""
        if self._pg is not None:
            return
        import ray
        from ray.util.placement_group import placement_group

        if self.strategy is None:
            nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call,unused-ignore]  # typed only where ray is installed
            alive = len([n for n in nodes if n.get("Alive")])
            self.strategy = "STRICT_SPREAD" if alive >= self.engines else "SPREAD"
        pg = placement_group(self.bundles(), strategy=self.strategy)
        await pg.ready()
        self._pg = pg

    def _strategy(self, bundle: int) -> Any:
        if self._pg is None:
            raise RuntimeError("ClusterPlacement.ready() must be awaited before placing actors")
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            placement_group=self._pg, placement_group_bundle_index=bundle,
        )

    def for_engine(self, engine: int) -> Any:
        """The scheduling strategy of engine ``engine`` (its set's bundle)."""
        return self._strategy(engine)

    def for_worker(self, worker: int) -> Any:
        """The scheduling strategy of rollout worker ``worker`` (its engine's bundle)."""
        return self._strategy(self.engine_of(worker))

    def remove(self) -> None:
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._pg)
            self._pg = None
