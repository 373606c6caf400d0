"""The rollout worker: a Ray actor that runs workflows (its policy calls go to the driver's gateway).

Imported inside Ray worker processes; the backend wraps the class with ``ray.remote`` so this
module stays importable (and testable) without a cluster.
"""

from __future__ import annotations

import os
import pickle
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from osmosis_ai.rollout.scope import PolicyRoute

__all__ = ["RolloutWorker", "RouteTemplate"]

SAMPLE_PLACEHOLDER = "__OSMOSIS_SAMPLE_ID__"


@dataclass(frozen=True)
class RouteTemplate:
    """A policy endpoint stand-in: each sample's route from the driver's URL template.

    The calls are recorded by the driver's gateway and collected by the driver's runner, so the
    worker never collects.
    """

    base_url: str
    api_key: str
    model: str

    def route(self, rollout_id: str, sample_id: str) -> PolicyRoute:
        return PolicyRoute(
            base_url=self.base_url.replace(SAMPLE_PLACEHOLDER, sample_id),
            api_key=self.api_key, model=self.model,
        )

    async def collect(self, rollout_id: str) -> dict[str, Any]:  # pragma: no cover - unused
        raise RuntimeError("policy calls are collected by the driver, not by a rollout worker")


class RolloutWorker:
    """Loads the entrypoint once, then runs many workflows concurrently (an async actor)."""

    def __init__(
        self, path: str, sys_path: list[str], config_blob: bytes | None, driver_module: str = "",
    ) -> None:
        sys.path[:0] = [p for p in sys_path if p not in sys.path]
        from osmosis_ai.rollout.running import load_entrypoint

        # A relative path: the rollout folder was shipped as this actor's working_dir (cwd).
        entrypoint = load_entrypoint(Path(path) if Path(path).is_absolute() else Path.cwd() / path)
        if driver_module and driver_module != entrypoint.module_name:
            # The driver pickled the workflow config under its own module name for the file.
            sys.modules.setdefault(driver_module, sys.modules[entrypoint.module_name])
        if config_blob is not None:
            entrypoint = replace(entrypoint, workflow_config=pickle.loads(config_blob))
        self.entrypoint = entrypoint

    def where(self) -> dict[str, Any]:
        """The node and process this worker runs in, and the file its workflow came from."""
        import inspect

        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "module_file": inspect.getfile(self.entrypoint.workflow_cls)}

    async def run(self, request: Any, route: dict[str, str]) -> dict[str, Any]:
        from osmosis_ai.rollout.running import execute_workflow

        run = await execute_workflow(self.entrypoint, request, RouteTemplate(**route))
        return run.to_wire()
