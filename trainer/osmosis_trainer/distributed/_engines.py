"""Inference engines as Ray actors behind the driver's policy gateway.

:class:`RayEnginePool` is an ``InferenceEngine`` for the gateway: it routes every sample's calls
to one engine actor (sticky per rollout and sample, so a multi-turn sample reuses its engine's
prefix cache), ships each step's adapter to every engine through the object store (the PEFT
folder's files, a few MB, put once) and waits until each engine confirms the version it
serves. A request whose engine died goes to another one; when the last engine is gone every
call fails with one clear :class:`EngineError` (the run then stops by ``max_failure_rate`` with
its last checkpoint).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from osmosis_ai.serving import EngineError, GenerationRequest, GenerationResult

__all__ = ["EngineActor", "RayEnginePool"]

_STICKY_MAX = 100_000


class EngineActor:
    """One HF engine (its own model copy) in a Ray actor."""

    def __init__(self, model_path: str, options: dict[str, Any]) -> None:
        from osmosis_trainer.engines import HFEngine

        self.engine = HFEngine(model_path, device=options.pop("device", "cpu"), **options)
        self._dir = Path(tempfile.mkdtemp(prefix="osmosis-adapter-"))

    def where(self) -> dict[str, Any]:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        return await self.engine.generate(req)

    async def load_adapter(self, files: dict[str, bytes], version: int) -> int:
        """Write the shipped adapter files locally, load them; the version now served."""
        folder = self._dir / f"v{version}"
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
        await self.engine.load_adapter(str(folder), version)
        return self.engine.policy_version

    async def close(self) -> None:
        await self.engine.close()


def _adapter_files(path: str) -> dict[str, bytes]:
    folder = Path(path)
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


class RayEnginePool:
    """``engines`` HF engine actors spread over the cluster, served as one engine.

    Args:
        model_path: the base model (a local folder readable on every node, or a hub id in
            each node's cache).
        engines: how many engine actors.
        cpus / gpus: resources reserved per engine actor.
        options: ``HFEngine`` keyword arguments (``max_new_tokens``, ``seed`` ...).
    """

    name = "ray-hf"
    provides_token_ids = True

    def __init__(
        self, model_path: str, *, engines: int, cpus: float = 1.0, gpus: float = 0.0,
        options: dict[str, Any] | None = None,
    ) -> None:
        import ray

        actor_cls: Any = ray.remote(EngineActor)
        opts = dict(options or {})
        opts.setdefault("device", "cuda" if gpus > 0 else "cpu")
        self._actors = [
            actor_cls.options(num_cpus=cpus, num_gpus=gpus, max_restarts=0,
                              max_concurrency=1000, scheduling_strategy="SPREAD")
            .remote(model_path, dict(opts))
            for _ in range(engines)
        ]
        self._alive = [True] * engines
        self._in_flight = [0] * engines
        self._sticky: OrderedDict[str, int] = OrderedDict()
        self._version = 0
        self.served_versions: list[int] = [0] * engines
        self.sync_times_s: list[float] = []
        self.engines_lost = 0
        self.places: list[dict[str, Any]] = []

    async def start(self) -> None:
        """Wait until every engine loaded its model (the first call does it otherwise)."""
        if not self.places:
            self.places = list(await asyncio.gather(*(a.where.remote() for a in self._actors)))

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def engines_alive(self) -> int:
        return sum(self._alive)

    def _pick(self, key: str) -> int:
        index = self._sticky.get(key)
        if index is not None and self._alive[index]:
            self._sticky.move_to_end(key)
            return index
        live = [i for i, ok in enumerate(self._alive) if ok]
        if not live:
            raise EngineError(
                f"every inference engine died ({self.engines_lost} lost); the run cannot go on",
                status_code=503, code="engines_lost",
            )
        index = min(live, key=lambda i: (self._in_flight[i], i))
        self._sticky[key] = index
        while len(self._sticky) > _STICKY_MAX:
            self._sticky.popitem(last=False)
        return index

    def _lost(self, index: int) -> None:
        if self._alive[index]:
            self._alive[index] = False
            self.engines_lost += 1

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        import ray.exceptions as rex

        key = f"{req.rollout_id}/{req.sample_id}"
        for _ in range(len(self._actors)):
            index = self._pick(key)
            self._in_flight[index] += 1
            try:
                result: GenerationResult = await self._actors[index].generate.remote(req)
                return result
            except (rex.RayActorError, rex.ActorUnavailableError) as exc:
                self._lost(index)  # the sample moves to another engine (no prefix cache there)
                last = exc
            except rex.RayTaskError as exc:
                cause = exc.as_instanceof_cause()  # type: ignore[no-untyped-call,unused-ignore]  # typed only where ray is installed
                raise cause if isinstance(cause, EngineError) else EngineError(str(exc)) from exc
            finally:
                self._in_flight[index] -= 1
        raise EngineError(f"every inference engine died: {last}", status_code=503,
                          code="engines_lost")

    async def load_adapter(self, path: str, version: int) -> None:
        """Ship the adapter to every live engine; returns when each confirms ``version``."""
        import ray
        import ray.exceptions as rex

        start = time.perf_counter()
        ref = ray.put(_adapter_files(path))
        live = [i for i, ok in enumerate(self._alive) if ok]
        replies = await asyncio.gather(
            *(self._actors[i].load_adapter.remote(ref, version) for i in live),
            return_exceptions=True,
        )
        for i, reply in zip(live, replies, strict=True):
            if isinstance(reply, rex.RayActorError | rex.ActorUnavailableError):
                self._lost(i)
            elif isinstance(reply, BaseException):
                raise EngineError(f"engine {i} could not load adapter v{version}: {reply}")
            elif reply != version:
                raise EngineError(f"engine {i} serves v{reply} after loading v{version}")
            else:
                self.served_versions[i] = int(reply)
        if not self.engines_alive:
            raise EngineError("every inference engine died while loading the adapter",
                              status_code=503, code="engines_lost")
        self._version = version
        self.sync_times_s.append(time.perf_counter() - start)

    async def close(self) -> None:
        import ray

        for i, actor in enumerate(self._actors):
            if self._alive[i]:
                ray.kill(actor)
        self._alive = [False] * len(self._actors)
