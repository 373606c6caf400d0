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
import logging
import os
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from osmosis_ai.serving import EngineError, GenerationRequest, GenerationResult, KeepsRollouts
from osmosis_trainer.distributed._placement import ClusterPlacement

__all__ = ["EngineActor", "RayEnginePool", "VLLMEngineActor"]

_STICKY_MAX = 100_000
_CLOSE_TIMEOUT_S = 60.0  # VLLMEngine waits up to 30 s for its server to exit, then kills it

logger = logging.getLogger("osmosis")


class EngineActor:
    """One HF engine (its own model copy) in a Ray actor."""

    def __init__(self, model_path: str, options: dict[str, Any]) -> None:
        from osmosis_trainer.engines import HFEngine
        from osmosis_trainer.models import training_dtype

        device = options.pop("device", "cpu")
        # [training] dtype resolves on the engine's own node: its CPU may differ from the driver's.
        dtype = training_dtype(options.pop("dtype", "auto"), device)
        self.engine: Any = HFEngine(model_path, device=device, dtype=dtype, **options)
        self._dir = Path(tempfile.mkdtemp(prefix="osmosis-adapter-"))

    def where(self) -> dict[str, Any]:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        result: GenerationResult = await self.engine.generate(req)
        return result

    async def load_adapter(self, files: dict[str, bytes], version: int) -> int:
        """Write the shipped adapter files locally, load them; the version now served."""
        folder = self._dir / f"v{version}"
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
        await self.engine.load_adapter(str(folder), version)
        return int(self.engine.policy_version)

    def forget_rollout(self, rollout_id: str) -> None:
        if isinstance(self.engine, KeepsRollouts):
            self.engine.forget_rollout(rollout_id)

    async def close(self) -> None:
        await self.engine.close()


class VLLMEngineActor(EngineActor):
    """One vLLM OpenAI server (a child process of the actor) on the GPUs Ray assigned to it.

    The server is launched by :class:`~osmosis_trainer.engines.VLLMEngine` (the same launcher
    as one-machine training) with ``CUDA_VISIBLE_DEVICES`` set from ``ray.get_gpu_ids()``;
    each step's adapter reaches it through vLLM's own ``/v1/load_lora_adapter`` endpoint.
    ``options`` are ``VLLMEngine`` keyword arguments plus ``index`` (names the log file).
    """

    def __init__(self, model_path: str, options: dict[str, Any]) -> None:
        import ray

        from osmosis_trainer.engines import VLLMEngine

        gpus = [str(g) for g in ray.get_gpu_ids()]
        if gpus:  # the child server sees exactly the GPUs Ray reserved for this actor
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
            if len(gpus) > 1:
                options["extra_args"] = [*options.get("extra_args", []),
                                         "--tensor-parallel-size", str(len(gpus))]
        index = options.pop("index", 0)
        self._dir = Path(tempfile.mkdtemp(prefix="osmosis-adapter-"))
        log_dir = Path(options.pop("log_dir", "") or self._dir)
        if not log_dir.is_dir():  # the driver's run folder is not on this node
            log_dir = self._dir
        options.pop("device", None)
        self.gpus = gpus
        self.engine = VLLMEngine(model_path=model_path, log_file=log_dir / f"vllm-engine-{index}.log",
                                 **options)

    async def where(self) -> dict[str, Any]:  # type: ignore[override]
        """Start the server (minutes on CPU), then say where it runs."""
        import ray

        await self.engine.start()
        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "gpus": self.gpus, "url": self.engine.base_url}


def _adapter_files(path: str) -> dict[str, bytes]:
    folder = Path(path)
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


class RayEnginePool:
    """``engines`` engine actors (HF model copies or vLLM servers) served as one engine.

    Args:
        model_path: the base model (a local folder readable on every node, or a hub id in
            each node's cache).
        engines: how many engine actors.
        cpus / gpus: resources reserved per engine actor (a vLLM engine: one server on
            its ``gpus`` GPUs; more than one runs it tensor-parallel).
        options: ``HFEngine`` keyword arguments (``max_new_tokens``, ``seed`` ...), or with
            ``kind="vllm"`` ``VLLMEngine`` launch arguments plus ``log_dir``.
        placement: engine sets (see :class:`ClusterPlacement`); else engines ``SPREAD``.
        name_prefix: names the actors ``{prefix}-{index}`` (``ray.get_actor``).
        kind: ``"hf"`` or ``"vllm"``.
    """

    name = "ray-hf"
    provides_token_ids = True

    def __init__(
        self, model_path: str, *, engines: int, cpus: float = 1.0, gpus: float = 0.0,
        options: dict[str, Any] | None = None, placement: ClusterPlacement | None = None,
        name_prefix: str | None = None, kind: str = "hf",
    ) -> None:
        if kind not in ("hf", "vllm"):
            raise ValueError(f"engine kind must be 'hf' or 'vllm', got {kind!r}")
        self.kind = kind
        self.name = f"ray-{kind}"
        self.model_path = model_path
        self.n_engines = engines
        self.cpus, self.gpus = cpus, gpus
        self.options = dict(options or {})
        if kind == "hf":
            self.options.setdefault("device", "cuda" if gpus > 0 else "cpu")
        self.placement = placement
        self.name_prefix = name_prefix
        self._actors: list[Any] = []
        self._alive = [True] * engines
        self._in_flight = [0] * engines
        self._sticky: OrderedDict[str, int] = OrderedDict()
        self._home: OrderedDict[str, int] = OrderedDict()
        self._version = 0
        self._start_lock: asyncio.Lock | None = None
        self.served_versions: list[int] = [0] * engines
        self.sync_times_s: list[float] = []
        self.engines_lost = 0
        self.lost_messages: list[str] = []
        self.calls_home = 0
        """Calls served by the engine of the sample's rollout worker (its node's engine)."""
        self.calls_away = 0
        """Calls served elsewhere (their home engine had died, or no home was set)."""
        self.places: list[dict[str, Any]] = []

    def names(self) -> list[str]:
        """The engine actors' Ray names (``ray.get_actor(name)``), when a prefix was given."""
        return [f"{self.name_prefix}-{i}" for i in range(self.n_engines)] if self.name_prefix else []

    def _actor_options(self, index: int) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "num_cpus": self.cpus, "num_gpus": self.gpus, "max_restarts": 0,
            "max_concurrency": 1000,
            "scheduling_strategy": (self.placement.for_engine(index)
                                    if self.placement is not None else "SPREAD"),
        }
        if self.name_prefix:
            opts["name"] = f"{self.name_prefix}-{index}"
        return opts

    async def start(self) -> None:
        """Place the engines and wait until each loaded its model (the first call does it
        otherwise)."""
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._actors:
                return
            import ray

            if self.placement is not None:
                await self.placement.ready()
            actor_cls: Any = ray.remote(self.actor_class())
            self._actors = [
                actor_cls.options(**self._actor_options(i)).remote(
                    self.model_path, {**self.options, **({"index": i} if self.kind == "vllm" else {})})
                for i in range(self.n_engines)
            ]
            self.places = list(await asyncio.gather(*(a.where.remote() for a in self._actors)))

    def actor_class(self) -> type:
        """The class each engine actor runs: ``hf`` (a model copy) or ``vllm`` (a server)."""
        return VLLMEngineActor if self.kind == "vllm" else EngineActor

    def prefer(self, rollout_id: str, engine: int) -> None:
        """Route ``rollout_id``'s calls to ``engine`` (its worker's node) while it is alive."""
        self._home[rollout_id] = engine
        self._home.move_to_end(rollout_id)
        while len(self._home) > _STICKY_MAX:
            self._home.popitem(last=False)

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def engines_alive(self) -> int:
        return sum(self._alive)

    def dead_message(self) -> str:
        """One line naming the dead engines and what to do about it."""
        died = "; ".join(self.lost_messages) or f"{self.engines_lost} lost"
        return (f"every inference engine died ({died}). Fix: bring the engines' nodes back "
                "(or lower [cluster] engines / engine_gpus to what the cluster still has), then "
                "'osmosis train resume' continues from the last checkpoint")

    def _pick(self, key: str, rollout_id: str) -> tuple[int, bool]:
        """The engine for a call and whether it is the rollout's home engine."""
        home = self._home.get(rollout_id)
        if home is not None and self._alive[home]:
            return home, True
        index = self._sticky.get(key)
        if index is not None and self._alive[index]:
            self._sticky.move_to_end(key)
            return index, False
        live = [i for i, ok in enumerate(self._alive) if ok]
        if not live:
            raise EngineError(self.dead_message(), status_code=503, code="engines_lost")
        index = min(live, key=lambda i: (self._in_flight[i], i))
        self._sticky[key] = index
        while len(self._sticky) > _STICKY_MAX:
            self._sticky.popitem(last=False)
        return index, False

    def _lost(self, index: int, exc: BaseException) -> None:
        if self._alive[index]:
            self._alive[index] = False
            self.engines_lost += 1
            place = self.places[index] if index < len(self.places) else {}
            self.lost_messages.append(
                f"engine {index} (node {str(place.get('node_id', '?'))[:12]}, pid "
                f"{place.get('pid', '?')}) died: {type(exc).__name__}"
            )

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        import ray.exceptions as rex

        if not self._actors:
            await self.start()
        key = f"{req.rollout_id}/{req.sample_id}"
        last: BaseException | None = None
        for _ in range(len(self._actors)):
            index, home = self._pick(key, req.rollout_id or "")
            self._in_flight[index] += 1
            try:
                result: GenerationResult = await self._actors[index].generate.remote(req)
            except (rex.RayActorError, rex.ActorUnavailableError) as exc:
                self._lost(index, exc)  # the sample moves to another engine (no prefix cache)
                last = exc
                continue
            except rex.RayTaskError as exc:
                cause = exc.as_instanceof_cause()  # type: ignore[no-untyped-call,unused-ignore]  # typed only where ray is installed
                raise cause if isinstance(cause, EngineError) else EngineError(str(exc)) from exc
            finally:
                self._in_flight[index] -= 1
            if home:
                self.calls_home += 1
            else:
                self.calls_away += 1
            return result
        raise EngineError(f"{self.dead_message()} (last: {last})", status_code=503,
                          code="engines_lost")

    def forget_rollout(self, rollout_id: str) -> None:
        """Tell every live engine that ``rollout_id`` has ended, without waiting: a message
        lost with its engine only leaves entries that the engine's cap drops later."""
        for actor, alive in zip(self._actors, self._alive, strict=False):
            if alive:
                actor.forget_rollout.remote(rollout_id)

    async def load_adapter(self, path: str, version: int) -> None:
        """Ship the adapter to every live engine; returns when each confirms ``version``."""
        import ray
        import ray.exceptions as rex

        if not self._actors:
            await self.start()
        start = time.perf_counter()
        ref = ray.put(_adapter_files(path))
        live = [i for i, ok in enumerate(self._alive) if ok]
        replies = await asyncio.gather(
            *(self._actors[i].load_adapter.remote(ref, version) for i in live),
            return_exceptions=True,
        )
        for i, reply in zip(live, replies, strict=True):
            if isinstance(reply, rex.RayActorError | rex.ActorUnavailableError):
                self._lost(i, reply)
            elif isinstance(reply, BaseException):
                raise EngineError(f"engine {i} could not load adapter v{version}: {reply}")
            elif reply != version:
                raise EngineError(f"engine {i} serves v{reply} after loading v{version}")
            else:
                self.served_versions[i] = int(reply)
        if not self.engines_alive:
            raise EngineError(self.dead_message(), status_code=503, code="engines_lost")
        self._version = version
        self.sync_times_s.append(time.perf_counter() - start)

    async def close(self) -> None:
        """Stop every live engine: first its own close (a vLLM actor stops its server, which
        ``ray.kill`` alone would leave running), bounded, then the actor."""
        import ray

        live = [a for i, a in enumerate(self._actors) if self._alive[i]]
        self._alive = [False] * len(self._actors)
        if live:
            closing = asyncio.gather(*(a.close.remote() for a in live), return_exceptions=True)
            try:
                await asyncio.wait_for(closing, _CLOSE_TIMEOUT_S)
            except TimeoutError:
                logger.warning("engine actors did not close in %.0f s; killing them",
                               _CLOSE_TIMEOUT_S)
        for actor in live:
            ray.kill(actor)
