"""Execution backends: where a workflow runs.

- :class:`LocalBackend` runs it in the runner's event loop (fast; a workflow that blocks the
  loop or crashes the interpreter takes the runner with it).
- :class:`ProcessBackend` runs each rollout in a worker process from a pool, so a crash
  (``os._exit``, a segfault), a memory hog or a loop-blocking workflow costs one rollout
  (category ``crashed`` or ``timeout``) and the worker is replaced.

Both run only the workflow; the runner collects the policy calls and grades in its own process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import struct
import sys
from pathlib import Path
from typing import Any, Protocol

from osmosis_ai.rollout._discovery import Entrypoint
from osmosis_ai.rollout._execution import WorkflowRequest, WorkflowRun, execute_workflow
from osmosis_ai.rollout._types import ErrorCategory, SampleError
from osmosis_ai.rollout.scope import PolicyEndpoint

__all__ = ["SAMPLE_PLACEHOLDER", "Backend", "LocalBackend", "ProcessBackend"]

SAMPLE_PLACEHOLDER = "__OSMOSIS_SAMPLE_ID__"
"""Stands for the sample id in the route template a worker process receives."""

_HEADER = struct.Struct(">I")
_CORE_DIR = str(Path(__file__).resolve().parents[2])


class Backend(Protocol):
    """Runs one workflow for a request; never raises except ``CancelledError``."""

    async def run_workflow(self, request: WorkflowRequest) -> WorkflowRun: ...

    async def aclose(self) -> None: ...


def _concurrency_limit(config: Any) -> asyncio.Semaphore | None:
    conc = getattr(config, "concurrency", None)
    n = getattr(conc, "max_concurrent", None)
    return asyncio.Semaphore(n) if isinstance(n, int) and n >= 1 else None


class LocalBackend:
    """Runs workflows in the current event loop.

    Honours ``workflow_config.concurrency.max_concurrent`` on top of the runner's concurrency.
    """

    def __init__(self, entrypoint: Entrypoint, endpoint: PolicyEndpoint) -> None:
        self.entrypoint = entrypoint
        self.endpoint = endpoint
        self._limit = _concurrency_limit(entrypoint.workflow_config)

    async def run_workflow(self, request: WorkflowRequest) -> WorkflowRun:
        return await execute_workflow(self.entrypoint, request, self.endpoint, self._limit)

    async def aclose(self) -> None:
        return None


def write_frame(stream: Any, obj: Any) -> None:
    """Write one length-prefixed pickle frame to a binary stream (used by the worker)."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: Any) -> Any:
    """Read one frame from a binary stream; ``None`` at end of stream."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    return pickle.loads(stream.read(size))


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "it stopped answering"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"it exited with code {code}"


class _Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def send(self, obj: Any) -> None:
        assert self.proc.stdin is not None
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.write(_HEADER.pack(len(data)) + data)
        await self.proc.stdin.drain()

    async def recv(self) -> Any:
        assert self.proc.stdout is not None
        header = await self.proc.stdout.readexactly(_HEADER.size)
        (size,) = _HEADER.unpack(header)
        return pickle.loads(await self.proc.stdout.readexactly(size))

    async def kill(self, *, grace_s: float = 0.0) -> int | None:
        """Stop the process (after ``grace_s`` for it to exit by itself); its exit code."""
        if grace_s > 0:
            # A worker whose pipe hit EOF has usually exited already. Signalling it anyway
            # would make Popen reap it behind asyncio's child watcher and lose the exit code.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    return await self.proc.wait()
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        return await self.proc.wait()


class ProcessBackend:
    """Runs each workflow in a worker process from a pool of at most ``max_workers``.

    A worker imports the entrypoint once and then runs rollouts one at a time. Policy calls go
    to routes built from a template (``endpoint.route(rollout_id, SAMPLE_PLACEHOLDER)``), so the
    endpoint object itself never crosses the process boundary; samples that adapters build in
    the worker come back as JSON. The workflow config is sent pickled when it pickles (else the
    worker uses the module's own).

    Args:
        entrypoint: the loaded entrypoint (it must have a ``path``).
        endpoint: the policy endpoint the routes come from.
        max_workers: the most worker processes alive at once.
        memory_limit_mb: cap each worker's address space (``RLIMIT_AS``, POSIX only); a
            workflow that exceeds it fails with ``MemoryError`` (or crashes) instead of
            starving the machine.
        kill_grace_s: how long past the workflow timeout a worker may stay silent before it is
            killed (a workflow blocking its event loop cannot enforce its own timeout).
        start_timeout_s: how long a new worker may take to import the entrypoint.
    """

    def __init__(
        self,
        entrypoint: Entrypoint,
        endpoint: PolicyEndpoint,
        *,
        max_workers: int = 4,
        memory_limit_mb: int | None = None,
        kill_grace_s: float = 5.0,
        start_timeout_s: float = 120.0,
    ) -> None:
        if entrypoint.path is None:
            raise ValueError("the process backend needs an entrypoint loaded from a file")
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.entrypoint = entrypoint
        self.endpoint = endpoint
        self.max_workers = max_workers
        self.memory_limit_mb = memory_limit_mb
        self.kill_grace_s = kill_grace_s
        self.start_timeout_s = start_timeout_s
        self._slots: asyncio.Queue[_Worker | None] | None = None
        self._workers: set[_Worker] = set()
        self._config_blob = self._pickle_config(entrypoint.workflow_config)

    @staticmethod
    def _pickle_config(config: Any) -> bytes | None:
        try:
            return pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # unpicklable config (a live client ...): the worker uses its own
            return None

    def _queue(self) -> asyncio.Queue[_Worker | None]:
        if self._slots is None:
            # One token per worker slot; None means "empty slot: start a worker".
            self._slots = asyncio.Queue()
            for _ in range(self.max_workers):
                self._slots.put_nowait(None)
        return self._slots

    async def _launch(self) -> _Worker:
        """Start one worker process (``python -m osmosis_ai.rollout._worker``), not yet set up."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_CORE_DIR, env.get("PYTHONPATH")) if p)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "osmosis_ai.rollout._worker",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
        )
        return _Worker(proc)

    async def _spawn(self) -> _Worker:
        worker = await self._launch()
        self._workers.add(worker)
        try:
            await worker.send({
                "path": str(self.entrypoint.path),
                "sys_path": list(sys.path),
                "config": self._config_blob,
                "memory_limit_mb": self.memory_limit_mb,
            })
            async with asyncio.timeout(self.start_timeout_s):
                hello = await worker.recv()
        except BaseException:
            await self._discard(worker)
            raise
        if hello.get("kind") != "ready":
            await self._discard(worker)
            raise RuntimeError(str(hello.get("message", "the worker failed to start")))
        return worker

    async def _discard(self, worker: _Worker, *, grace_s: float = 0.0) -> int | None:
        self._workers.discard(worker)
        return await worker.kill(grace_s=grace_s)

    async def run_workflow(self, request: WorkflowRequest) -> WorkflowRun:
        slots = self._queue()
        token = await slots.get()
        worker = token if token is not None and token.alive else None
        try:
            if worker is None:
                try:
                    worker = await self._spawn()
                except (TimeoutError, Exception) as exc:
                    return _error_run(ErrorCategory.INTERNAL_ERROR, f"could not start a worker process: {exc}")
            return await self._run_on(worker, request)
        except BaseException:
            if worker is not None:
                await self._discard(worker)  # cancelled mid-rollout: the worker state is unknown
                worker = None
            raise
        finally:
            slots.put_nowait(worker if worker is not None and worker.alive else None)

    async def _run_on(self, worker: _Worker, request: WorkflowRequest) -> WorkflowRun:
        template = self.endpoint.route(request.rollout_id, SAMPLE_PLACEHOLDER)
        job = {
            "request": request,
            "route": {
                "base_url": template.base_url,
                "api_key": template.api_key,
                "model": template.model,
            },
        }
        deadline = None if request.timeout_s is None else request.timeout_s + self.kill_grace_s
        try:
            await worker.send(job)
            async with asyncio.timeout(deadline):
                reply = await worker.recv()
        except TimeoutError:
            await self._discard(worker)
            return _error_run(
                ErrorCategory.TIMEOUT,
                f"workflow timed out after {request.timeout_s:g} s and did not stop (it blocks its "
                "event loop?); its worker process was killed and replaced",
            )
        except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError):
            code = await self._discard(worker, grace_s=5.0)
            return _error_run(
                ErrorCategory.CRASHED,
                f"the worker process running rollout {request.rollout_id} died "
                f"({_describe_exit(code)}); it was replaced",
            )
        return WorkflowRun.from_wire(reply["run"])

    async def aclose(self) -> None:
        """Stop every worker process."""
        workers, self._workers = list(self._workers), set()
        for worker in workers:
            if worker.alive and worker.proc.stdin is not None:
                worker.proc.stdin.close()  # a clean EOF: the worker exits on its own
        for worker in workers:
            try:
                async with asyncio.timeout(2.0):
                    await worker.proc.wait()
            except TimeoutError:
                await worker.kill()
        self._slots = None


def _error_run(category: ErrorCategory, message: str) -> WorkflowRun:
    return WorkflowRun(error=SampleError(category=category, message=message, where="workflow"))
