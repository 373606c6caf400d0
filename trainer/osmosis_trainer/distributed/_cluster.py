"""Joining the Ray cluster named by ``[cluster]`` and the rollout source that reports on it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from osmosis_ai.config import TrainingConfig
from osmosis_ai.errors import TrainingError
from osmosis_ai.rollout.running import RolloutRow
from osmosis_trainer.distributed._backend import RayBackend
from osmosis_trainer.distributed._engines import RayEnginePool
from osmosis_trainer.loop import AdapterServer, GatewayRolloutSource, GroupRunner, StepRollouts

__all__ = ["ClusterRolloutSource", "connect", "job_runtime_env"]


@contextlib.contextmanager
def connect(config: TrainingConfig) -> Iterator[dict[str, float]]:
    """Join the cluster of ``[cluster] address`` for the block; yields its resources."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the ray extra is missing
        raise TrainingError(
            "[cluster] address is set but Ray is not installed: pip install 'osmosis-ai[ray]'"
        ) from exc
    address = config.cluster.address
    runtime_env = job_runtime_env(config)
    try:
        ray.init(
            address=address,
            logging_level=logging.WARNING,
            log_to_driver=True,
            ignore_reinit_error=True,
            runtime_env=runtime_env,
        )
    except Exception as exc:
        if runtime_env is not None and "working_dir" in str(exc):
            raise TrainingError(
                f"[cluster] ship_rollout: could not ship the rollout folder "
                f"{runtime_env['working_dir']} to the cluster ({exc}). Move large files out of "
                "it, or set ship_rollout = false when every node has the folder at the same path."
            ) from exc
        raise TrainingError(
            f"[cluster] address = {address!r}: could not join the Ray cluster ({exc}). Start "
            "it first (`ray start --head` on the head node, `ray start --address HEAD:6379` on "
            "the others), or remove [cluster] to train in one process."
        ) from exc
    try:
        yield dict(ray.cluster_resources())  # type: ignore[no-untyped-call,unused-ignore]  # typed only where ray is installed
    finally:
        ray.shutdown()


SHIP_EXCLUDES = (
    ".git",
    "__pycache__",
    "*.pyc",
    ".venv",
    "venv",
    ".nox",
    "runs",
    ".osmosis",
    # Secrets: a rollout folder's .env/.env.local stay on this machine (the upload lands in
    # every node's object store and temp folder); the workers get [env] instead.
    ".env*",
)
"""Paths never shipped with the rollout folder (gitignore-style patterns, matched by name at
any depth)."""


def job_runtime_env(config: TrainingConfig) -> dict[str, Any] | None:
    """The Ray job's ``runtime_env``: the rollout folder as ``working_dir`` (``ship_rollout``).

    ``ray.init`` zips and uploads it once to the cluster's object store; every node unpacks
    it and starts the job's workers in it, so the user's workflow imports on nodes that have
    no copy of the folder. None with ``[remote]`` (the workflows run in the user's server).
    """
    if not config.cluster.ship_rollout or config.remote is not None:
        return None
    folder = config.entrypoint_path(must_exist=True).parent
    return {"working_dir": str(folder), "excludes": list(SHIP_EXCLUDES)}


class ClusterRolloutSource(GatewayRolloutSource):
    """The gateway rollout source with the cluster's state in every step's metrics.

    ``cluster_workers``/``cluster_workers_lost``/``cluster_retries`` (rollouts restarted this
    step) with rollout worker actors; with engine actors ``cluster_engines``/
    ``cluster_engines_lost``, ``cluster_calls_off_node`` (calls this step not served by the
    engine on their worker's node) and ``adapter_sync_s`` (the last adapter shipped to every
    engine, confirmed). When the last engine has died the step raises a
    :class:`TrainingError` naming the dead engines and the fix: the run ends ``failed`` and
    keeps its last checkpoint.
    """

    def __init__(
        self,
        runner: GroupRunner,
        gateway: AdapterServer,
        *,
        backend: RayBackend | None,
        engines: RayEnginePool | None = None,
        make_runner: Callable[[int], GroupRunner] | None = None,
        max_prompt_length: int | None = None,
    ) -> None:
        super().__init__(
            runner, gateway, make_runner=make_runner, max_prompt_length=max_prompt_length
        )
        self.backend = backend
        self.engines = engines
        self.on_workers_lost: Callable[[], None] | None = None
        """Called after the first step and whenever a worker or engine was lost."""
        self._lost_seen = -1

    async def collect(
        self, rows: Sequence[RolloutRow], *, step: int, n_samples: int | None = None
    ) -> StepRollouts:
        retries = self.backend.stats.retries if self.backend is not None else 0
        away = self.engines.calls_away if self.engines is not None else 0
        out = await super().collect(rows, step=step, n_samples=n_samples)
        lost = 0
        if self.backend is not None:
            out.metrics.update(self.backend.stats.metrics(self.backend.workers_alive))
            out.metrics["cluster_retries"] = float(self.backend.stats.retries - retries)
            lost += self.backend.stats.workers_lost
        if self.engines is not None:
            if not self.engines.engines_alive:
                raise TrainingError(f"step {step}: {self.engines.dead_message()}")
            out.metrics["cluster_engines"] = float(self.engines.engines_alive)
            out.metrics["cluster_engines_lost"] = float(self.engines.engines_lost)
            if self.backend is not None and self.backend.placement is not None:
                out.metrics["cluster_calls_off_node"] = float(self.engines.calls_away - away)
            if self.engines.sync_times_s:
                out.metrics["adapter_sync_s"] = self.engines.sync_times_s[-1]
            lost += self.engines.engines_lost
        if lost != self._lost_seen and self.on_workers_lost is not None:
            self._lost_seen = lost
            self.on_workers_lost()
        return out
