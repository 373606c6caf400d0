"""The Ray side of a ``[cluster]`` job: connection, engine pool, rollout workers, reporting."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from osmosis_trainer.job._engines import vllm_options
from osmosis_trainer.loop import GatewayRolloutSource

if TYPE_CHECKING:
    from osmosis_ai.config import TrainingConfig
    from osmosis_ai.rollout.running import Entrypoint
    from osmosis_ai.rollout.scope import PolicyEndpoint
    from osmosis_ai.runs import RunDir
    from osmosis_trainer.distributed import ClusterPlacement, RayBackend, RayEnginePool
    from osmosis_trainer.loop import AdapterServer, GroupRunner
    from osmosis_trainer.models import LoadedModel

__all__ = ["ClusterJob"]

logger = logging.getLogger("osmosis")


class ClusterJob:
    """The Ray side of a ``[cluster]`` job: connection, worker pool, reporting."""

    def __init__(self, config: TrainingConfig, run: RunDir) -> None:
        from osmosis_trainer.distributed import connect

        self.config = config
        self.run = run
        self._ctx = connect(config)
        self._backend: RayBackend | None = None
        self._pool: RayEnginePool | None = None
        self._placement: ClusterPlacement | None = None
        self._connected = False

    def connect(self) -> None:
        self._ctx.__enter__()
        self._connected = True

    async def engine_pool(self, max_new_tokens: int, loaded: LoadedModel) -> RayEnginePool:
        from osmosis_trainer.distributed import ClusterPlacement, RayEnginePool

        c, t = self.config.cluster, self.config.training
        # Each engine packed with its rollout workers on one node; engines spread over nodes.
        self._placement = ClusterPlacement(
            engines=c.engines, workers=0 if self.config.remote is not None else c.rollout_workers,
            engine_cpus=c.engine_cpus, engine_gpus=c.engine_gpus, worker_cpus=c.worker_cpus,
        )
        options: dict[str, object]  # the engine's keyword arguments
        model_path = self.config.experiment.model_path
        if t.engine == "vllm":  # one vLLM server per engine actor, on the GPUs Ray gave it
            device = "cuda" if c.engine_gpus > 0 else "cpu"
            launch = vllm_options(self.config, loaded, device, self.run)
            model_path = launch["model_path"]
            options = {k: v for k, v in launch.items() if k != "model_path"}
            options["log_dir"] = str(self.run.path)
        else:
            options = {"max_new_tokens": max_new_tokens, "seed": t.seed, "dtype": t.dtype,
                       "max_batch_size": t.step_concurrency}
        self._pool = RayEnginePool(
            model_path, engines=c.engines, cpus=c.engine_cpus, gpus=c.engine_gpus,
            placement=self._placement, name_prefix=f"osmosis-engine-{self.run.run_id}",
            options=options, kind=t.engine,
        )
        await self._pool.start()
        return self._pool

    def backend(self, entry: Entrypoint, gateway: PolicyEndpoint) -> RayBackend | Literal["local"]:
        from osmosis_trainer.distributed import RayBackend

        if self._backend is None:
            if entry.path is None:  # [remote]: the server runs the workflows
                return "local"
            c = self.config.cluster
            self._backend = RayBackend(
                entry, gateway, workers=c.rollout_workers, worker_cpus=c.worker_cpus,
                max_retries=c.max_retries, placement=self._placement, engines=self._pool,
                ship_rollout=c.ship_rollout, env=dict(self.config.env),
            )
        return self._backend

    def source(
        self,
        runner: GroupRunner,
        gateway: AdapterServer,
        *,
        make_runner: Callable[[int], GroupRunner],
        max_prompt_length: int,
    ) -> GatewayRolloutSource:
        from osmosis_trainer.distributed import ClusterRolloutSource

        if self._backend is None and self._pool is None:
            return GatewayRolloutSource(
                runner, gateway, make_runner=make_runner, max_prompt_length=max_prompt_length
            )
        src = ClusterRolloutSource(
            runner, gateway, backend=self._backend, engines=self._pool,
            make_runner=make_runner, max_prompt_length=max_prompt_length,
        )
        c = self.config.cluster
        self.run.update_status(cluster={
            "address": c.address, "workers": c.rollout_workers if self._backend else 0,
            "workers_lost": 0, "engines": c.engines, "engines_lost": 0,
        })
        src.on_workers_lost = self.report
        return src

    def report(self) -> None:
        """Write the cluster's state (live/lost actors, where each runs) into status.json."""
        backend, pool = self._backend, self._pool
        # JSON for status.json: counts, node ids, URLs and messages side by side.
        info: dict[str, Any] = {"address": self.config.cluster.address, "workers": 0,
                                "workers_lost": 0}
        if backend is not None:
            info.update(workers=backend.workers_alive, workers_lost=backend.stats.workers_lost,
                        lost=backend.stats.lost_messages[-5:],
                        worker_nodes=[w["node_id"] for w in backend.workers],
                        worker_engines=[w["engine"] for w in backend.workers])
            if backend.stats.workers_lost:
                logger.warning("%d rollout worker(s) lost; going on with %d",
                               backend.stats.workers_lost, backend.workers_alive)
        if pool is not None:
            info.update(engines=pool.engines_alive, engines_lost=pool.engines_lost,
                        engine_nodes=[p["node_id"] for p in pool.places])
            if pool.kind == "vllm":  # each actor's vLLM server (on its node)
                info["engine_urls"] = [p.get("url") for p in pool.places]
            info["lost"] = [*info.get("lost", []), *pool.lost_messages[-5:]]
            if pool.engines_lost:
                logger.warning("%d inference engine(s) lost; going on with %d",
                               pool.engines_lost, pool.engines_alive)
        self.run.update_status(cluster=info)

    def close(self) -> None:
        if self._backend is not None:
            self._backend.shutdown()
        if self._placement is not None:
            self._placement.remove()
        if self._connected:
            self._ctx.__exit__(None, None, None)

