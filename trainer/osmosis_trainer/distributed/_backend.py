"""``RayBackend``: the rollout runner's backend that runs workflows on Ray actors.

The runner (in core) stays where it is, in the driver: it builds each request, collects the
policy calls the driver's gateway recorded, and grades. Only the workflow runs in a worker
actor; its policy calls go over HTTP to the gateway at ``endpoint.route(...)``.

A worker that dies (its process killed, its node lost) is dropped; the rollouts it was running
are started again on another live worker, at most ``max_retries`` times each, after the
calls the dead attempt left in the gateway are discarded (so nothing is counted twice).
"""

from __future__ import annotations

import asyncio
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from osmosis_ai.rollout import ErrorCategory, SampleError
from osmosis_ai.rollout.running import Entrypoint, WorkflowRequest, WorkflowRun
from osmosis_ai.rollout.scope import PolicyEndpoint
from osmosis_trainer.distributed._actor import SAMPLE_PLACEHOLDER, RolloutWorker
from osmosis_trainer.distributed._engines import RayEnginePool
from osmosis_trainer.distributed._placement import ClusterPlacement

__all__ = ["ClusterStats", "RayBackend"]


@dataclass
class ClusterStats:
    """Counters of the worker pool (read into step metrics and the run's status)."""

    workers_started: int = 0
    workers_lost: int = 0
    retries: int = 0
    """Rollouts started again because their worker died."""
    start_failures: int = 0
    """Worker processes that died before they answered, each replaced by a new one."""
    lost_messages: list[str] = field(default_factory=list)

    def metrics(self, alive: int) -> dict[str, float]:
        return {
            "cluster_workers": float(alive),
            "cluster_workers_lost": float(self.workers_lost),
            "cluster_retries": float(self.retries),
        }


@dataclass
class _Worker:
    index: int
    handle: Any
    node_id: str = ""
    pid: int = 0
    in_flight: int = 0
    alive: bool = True
    module_file: str = ""
    engine: int | None = None


def _actor_died(exc: BaseException) -> bool:
    import ray.exceptions as rex

    return isinstance(exc, rex.RayActorError | rex.ActorUnavailableError | rex.WorkerCrashedError)


def _init_failed(exc: BaseException) -> bool:
    """The actor's constructor raised (the entrypoint did not load), as opposed to its process
    dying."""
    return bool(getattr(exc, "actor_init_failed", False))


class RayBackend:
    """Runs each workflow on one of ``workers`` Ray actors (least busy first).

    Args:
        entrypoint: the loaded entrypoint (loaded from a file).
        endpoint: the driver's policy endpoint (the gateway) the routes come from.
        workers: how many worker actors. Without ``placement`` they are spread over the nodes
            by a ``SPREAD`` placement group of one ``{"CPU": worker_cpus}`` bundle each.
        worker_cpus: CPUs reserved per worker.
        max_retries: restarts of a rollout whose worker died before it counts as ``crashed``.
        placement: engine sets (each engine packed with its workers on one node); each
            rollout's calls then go to its worker's engine (``engines.prefer``).
        engines: the engine pool the gateway serves from (with ``placement``).
        ship_rollout: the job's Ray ``runtime_env`` ``working_dir`` is the rollout folder (the
            entrypoint's folder; :func:`connect` ships it with ``ray.init``): workers load the
            entrypoint from their node's unpacked copy, so a node without the folder imports
            it. ``False``: workers load the file by the driver's path (a shared checkout).
        env: environment variables for the workers (the config's ``[env]``: Ray workers
            inherit their node's environment, not the driver's).
    """

    def __init__(
        self,
        entrypoint: Entrypoint,
        endpoint: PolicyEndpoint,
        *,
        workers: int = 2,
        worker_cpus: float = 1.0,
        max_retries: int = 2,
        placement: ClusterPlacement | None = None,
        engines: RayEnginePool | None = None,
        ship_rollout: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        if entrypoint.path is None:
            raise ValueError("the ray backend needs an entrypoint loaded from a file")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.entrypoint = entrypoint
        self.endpoint = endpoint
        self.n_workers = workers
        self.worker_cpus = worker_cpus
        self.max_retries = max_retries
        self.placement = placement
        self.engines = engines
        self.ship_rollout = ship_rollout
        self.env = dict(env or {})
        self.stats = ClusterStats()
        self._workers: list[_Worker] = []
        self._pg: Any = None
        self._start_lock: asyncio.Lock | None = None
        self._load_error: str | None = None
        """Why the entrypoint did not load in a worker: every later start fails with it at once
        (starting the pool again would load the same file the same way)."""

    @property
    def workers_alive(self) -> int:
        return sum(w.alive for w in self._workers)

    @property
    def workers(self) -> list[dict[str, Any]]:
        """Each worker's index, node id, pid and whether it is alive."""
        return [
            {"index": w.index, "node_id": w.node_id, "pid": w.pid, "alive": w.alive,
             "engine": w.engine, "module_file": w.module_file}
            for w in self._workers
        ]

    def handle(self, index: int) -> Any:
        """The actor handle of worker ``index`` (tests kill workers through it)."""
        return self._workers[index].handle

    async def start(self) -> None:
        """Place and start the workers (done by the first rollout when not called).

        A start that fails leaves nothing running; the next call tries again, unless the
        entrypoint failed to load in a worker: then every later call fails with that error.
        """
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._workers:
                return
            if self._load_error is not None:
                raise RuntimeError(self._load_error)
            import ray
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            try:
                config_blob: bytes | None = pickle.dumps(self.entrypoint.workflow_config)
            except Exception:  # an unpicklable config: each worker uses the module's own
                config_blob = None
            if self.placement is not None:
                await self.placement.ready()
                strategies = [self.placement.for_worker(i) for i in range(self.n_workers)]
            else:
                pg = placement_group([{"CPU": self.worker_cpus}] * self.n_workers,
                                     strategy="SPREAD")
                await pg.ready()
                self._pg = pg
                strategies = [
                    PlacementGroupSchedulingStrategy(placement_group=pg,
                                                     placement_group_bundle_index=i)
                    for i in range(self.n_workers)
                ]
            path = Path(str(self.entrypoint.path))
            runtime_env: dict[str, Any] = {"env_vars": self.env} if self.env else {}
            load = {"path": str(path), "sys_path": list(sys.path), "config_blob": config_blob,
                    "driver_module": self.entrypoint.module_name}
            if self.ship_rollout:
                # Uploaded by ray.init to the cluster's store, unpacked on each node; a
                # worker's cwd is its node's copy.
                load["path"] = path.name
            actor_cls: Any = ray.remote(RolloutWorker)

            def make(i: int) -> Any:
                return actor_cls.options(
                    num_cpus=self.worker_cpus, max_restarts=0, max_concurrency=1000,
                    scheduling_strategy=strategies[i], runtime_env=runtime_env or None,
                ).remote(**load)

            started = await asyncio.gather(
                *(self._start_worker(i, make) for i in range(self.n_workers)),
                return_exceptions=True,
            )
            workers = [w for w in started if isinstance(w, _Worker)]
            failed = [e for e in started if isinstance(e, BaseException)]
            if failed:
                # Nothing half-started stays behind: the next rollout starts a clean pool.
                for w in workers:
                    ray.kill(w.handle)
                self._remove_placement_group()
                if _init_failed(failed[0]):
                    self._load_error = str(failed[0])
                raise failed[0]
            self._workers = workers
            self.stats.workers_started = len(self._workers)

    async def _start_worker(self, index: int, make: Callable[[int], Any]) -> _Worker:
        """Worker ``index``, started again (at most ``max_retries`` times) when its process
        dies before it answers: a node short of memory can kill a worker while it loads. An
        entrypoint that fails to load is not retried (it would fail the same way)."""
        for attempt in range(self.max_retries + 1):
            handle = make(index)
            try:
                place = await handle.where.remote()
            except Exception as exc:
                if not _actor_died(exc) or _init_failed(exc) or attempt == self.max_retries:
                    raise
                self.stats.start_failures += 1
                self.stats.lost_messages.append(
                    f"rollout worker {index} died while starting: {type(exc).__name__}"
                )
                continue
            return _Worker(index, handle, node_id=place["node_id"], pid=place["pid"],
                           module_file=place["module_file"],
                           engine=self.placement.engine_of(index) if self.placement else None)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _pick(self) -> _Worker | None:
        live = [w for w in self._workers if w.alive]
        return min(live, key=lambda w: (w.in_flight, w.index)) if live else None

    def _discard_partial_calls(self, rollout_id: str) -> None:
        # The dead attempt may have made policy calls; they must not join the retry's.
        store = getattr(self.endpoint, "store", None)
        if store is not None:
            store.pop(rollout_id, forget=False)

    async def run_workflow(self, request: WorkflowRequest) -> WorkflowRun:
        try:
            await self.start()
        except Exception as exc:
            return _error_run(ErrorCategory.INTERNAL_ERROR, f"could not start Ray workers: {exc}")
        template = self.endpoint.route(request.rollout_id, SAMPLE_PLACEHOLDER)
        route = {"base_url": template.base_url, "api_key": template.api_key,
                 "model": template.model}
        deaths: list[str] = []
        for attempt in range(self.max_retries + 1):
            worker = self._pick()
            if worker is None:
                break
            worker.in_flight += 1
            if self.engines is not None and worker.engine is not None:
                self.engines.prefer(request.rollout_id, worker.engine)
            try:
                wire = await worker.handle.run.remote(request, route)
            except Exception as exc:
                if not _actor_died(exc):
                    return _error_run(ErrorCategory.INTERNAL_ERROR, f"rollout worker error: {exc}")
                if worker.alive:
                    worker.alive = False
                    self.stats.workers_lost += 1
                    self.stats.lost_messages.append(
                        f"rollout worker {worker.index} (pid {worker.pid}) died: "
                        f"{type(exc).__name__}"
                    )
                deaths.append(f"worker {worker.index}")
                self._discard_partial_calls(request.rollout_id)
                if attempt < self.max_retries and self._pick() is not None:
                    self.stats.retries += 1
                continue
            finally:
                worker.in_flight -= 1
            return WorkflowRun.from_wire(wire)
        if self._pick() is None:
            message = "every rollout worker died (" + ", ".join(self.stats.lost_messages) + ")"
        else:
            message = (f"rollout {request.rollout_id}: its worker died {len(deaths)} times "
                       f"({', '.join(deaths)}); gave up after {self.max_retries} retries")
        return _error_run(ErrorCategory.CRASHED, message)

    async def aclose(self) -> None:
        """Nothing: one pool serves several runners (training and validation); see shutdown."""
        return None

    def shutdown(self) -> None:
        """Stop the workers and free their placement group."""
        import ray

        for w in self._workers:
            if w.alive:
                ray.kill(w.handle)
        self._workers = []
        self._remove_placement_group()

    def _remove_placement_group(self) -> None:
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._pg)
            self._pg = None


def _error_run(category: ErrorCategory, message: str) -> WorkflowRun:
    return WorkflowRun(error=SampleError(category=category, message=message, where="workflow"))
