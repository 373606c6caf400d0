"""The HF engine in a child process of its own.

In process, the engine's decoding loop, the trainer's update and the event loop (gateway,
rollouts) take turns on one interpreter lock. On a small model all three are mostly Python, so
generating the next step's rollouts while this step trains (``[algorithm] rollouts_ahead``)
gains little: they cannot run at the same time. In a child process the engine decodes on its
own core while the parent trains, like a vLLM server does. Requests and results cross a pipe as
plain dicts (about 0.1 ms per call); adapters are loaded from the folder the trainer saved.

The child is a fresh interpreter (``python -c``) that connects back over a local socket with a
one-time key, rather than a ``multiprocessing`` spawn, which would re-run the user's main
script in the child when it lacks an ``if __name__ == "__main__"`` guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from osmosis_ai.serving import EngineError, GenerationRequest, GenerationResult

__all__ = ["HFProcessEngine"]

logger = logging.getLogger("osmosis")


class HFProcessEngine:
    """:class:`~osmosis_trainer.engines.HFEngine` served from a spawned child process.

    Args:
        model_path: what :func:`osmosis_trainer.models.load_model` accepts; the child loads it.
        device: the child's torch device.
        dtype: model dtype (``"auto"``: fp32 on CPU, bf16 on CUDA).
        torch_threads: the child's torch CPU threads (``None``: torch's default).
        start_timeout_s: how long the child may take to load the model.
        **engine_kwargs: passed to ``HFEngine`` in the child (``max_batch_size``, ``seed`` ...).
    """

    name = "hf"
    provides_token_ids = True

    def __init__(
        self,
        model_path: str,
        *,
        device: str = "cpu",
        dtype: str = "auto",
        torch_threads: int | None = None,
        start_timeout_s: float = 900.0,
        **engine_kwargs: Any,
    ) -> None:
        authkey = secrets.token_bytes(32)
        family = "AF_UNIX" if hasattr(socket, "AF_UNIX") else "AF_INET"
        address = None if family == "AF_UNIX" else ("127.0.0.1", 0)
        with Listener(address, family=family, authkey=authkey) as listener:
            env = {
                **os.environ,
                _ADDRESS_ENV: repr(listener.address),
                _KEY_ENV: authkey.hex(),
            }
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD_COMMAND], env=env, stdin=subprocess.DEVNULL
            )
            self._conn = self._accept(listener, start_timeout_s)
        self._conn.send((model_path, device, dtype, torch_threads, engine_kwargs))
        self.model_name = self._await_ready(start_timeout_s)
        self._version = 0
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self._pending_lock = threading.Lock()
        self._dead: str | None = None
        self._reader = threading.Thread(target=self._read, name="osmosis-hf-engine-pipe", daemon=True)
        self._reader.start()

    @property
    def policy_version(self) -> int:
        return self._version

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        payload = await self._call("generate", req.model_dump())
        return GenerationResult.model_validate(payload)

    async def load_adapter(self, path: str, version: int) -> None:
        await self._call("load", (path, version))
        self._version = version

    async def close(self) -> None:
        if self._proc.poll() is None:
            with contextlib.suppress(OSError), self._send_lock:
                self._conn.send(("stop", 0, None))
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(self._proc.wait, 30)
        if self._proc.poll() is None:
            self._proc.kill()
            await asyncio.to_thread(self._proc.wait)
        self._conn.close()

    # -- plumbing --------------------------------------------------------------------------

    def _accept(self, listener: Listener, timeout_s: float) -> Connection:
        accepted: list[Connection] = []
        thread = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout_s
        while thread.is_alive():
            thread.join(0.2)
            self._check_alive(deadline, timeout_s)
        if not accepted:
            self._proc.kill()
            raise EngineError("the HF engine process could not connect back", status_code=503)
        return accepted[0]

    def _check_alive(self, deadline: float, timeout_s: float) -> None:
        if self._proc.poll() is not None:
            raise EngineError(
                f"the HF engine process exited while starting (exit code "
                f"{self._proc.returncode}); its error is printed above",
                status_code=503,
            )
        if time.monotonic() > deadline:
            self._proc.kill()
            raise EngineError(
                f"the HF engine process did not load the model in {timeout_s:.0f} s "
                "(raise start_timeout_s for big models on slow disks)",
                status_code=503,
            )

    def _await_ready(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while not self._conn.poll(0.2):
            self._check_alive(deadline, timeout_s)
        kind, _, detail = self._conn.recv()
        if kind != "ready":
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
            raise EngineError(f"the HF engine process could not start: {detail}", status_code=503)
        return str(detail)

    async def _call(self, kind: str, payload: Any) -> Any:
        if self._dead is not None:
            raise EngineError(self._dead, status_code=503, code="engine_closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        rid = next(self._ids)
        with self._pending_lock:
            self._pending[rid] = (loop, future)
        try:
            with self._send_lock:
                self._conn.send((kind, rid, payload))
        except OSError as exc:
            with self._pending_lock:
                self._pending.pop(rid, None)
            raise EngineError(f"the HF engine process is gone: {exc}", status_code=503) from exc
        return await future

    def _read(self) -> None:
        while True:
            try:
                kind, rid, payload = self._conn.recv()
            except (EOFError, OSError):
                self._fail_all("the HF engine process exited")
                return
            with self._pending_lock:
                entry = self._pending.pop(rid, None)
            if entry is None:
                continue
            loop, future = entry
            if kind == "ok":
                loop.call_soon_threadsafe(_settle, future, payload, None)
            else:
                message, status, code = payload
                error = EngineError(message, status_code=status, code=code or "engine_error")
                loop.call_soon_threadsafe(_settle, future, None, error)

    def _fail_all(self, message: str) -> None:
        self._dead = message
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        for loop, future in pending.values():
            with contextlib.suppress(RuntimeError):  # the caller's loop is already closed
                loop.call_soon_threadsafe(
                    _settle, future, None, EngineError(message, status_code=503)
                )


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return  # the caller went away
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


# -- the child ------------------------------------------------------------------------------

_ADDRESS_ENV = "OSMOSIS_HF_ENGINE_ADDRESS"
_KEY_ENV = "OSMOSIS_HF_ENGINE_KEY"
_CHILD_COMMAND = "from osmosis_trainer.engines._hf_process import child_main; child_main()"


def child_main() -> None:
    """Entry point of the child: connect back, load the engine, serve until told to stop."""
    import ast

    import torch

    from osmosis_trainer.engines._hf import HFEngine

    address = ast.literal_eval(os.environ.pop(_ADDRESS_ENV))
    conn = Client(address, authkey=bytes.fromhex(os.environ.pop(_KEY_ENV)))
    model_path, device, dtype, torch_threads, engine_kwargs = conn.recv()
    if torch_threads:
        torch.set_num_threads(torch_threads)
    try:
        engine = HFEngine(model_path, device=device, dtype=dtype, **engine_kwargs)
    except BaseException as exc:  # report, then exit: the parent raises with this text
        conn.send(("failed", 0, f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", 0, engine.model_name))
    asyncio.run(_serve(conn, engine))


async def _serve(conn: Any, engine: Any) -> None:
    loop = asyncio.get_running_loop()
    send_lock = threading.Lock()
    stopped = asyncio.Event()

    def send(message: tuple[str, int, Any]) -> None:
        with send_lock, contextlib.suppress(OSError):
            conn.send(message)

    async def handle(kind: str, rid: int, payload: Any) -> None:
        try:
            if kind == "generate":
                result = await engine.generate(GenerationRequest.model_validate(payload))
                send(("ok", rid, result.model_dump()))
            else:
                await engine.load_adapter(*payload)
                send(("ok", rid, None))
        except EngineError as exc:
            send(("error", rid, (str(exc), exc.status_code, exc.code)))
        except Exception as exc:  # keep serving; fail only this call
            send(("error", rid, (f"HF engine process: {exc!r}", 503, None)))

    def read() -> None:
        while True:
            try:
                kind, rid, payload = conn.recv()
            except (EOFError, OSError):  # the parent is gone
                kind, rid, payload = "stop", 0, None
            if kind == "stop":
                loop.call_soon_threadsafe(stopped.set)
                return
            asyncio.run_coroutine_threadsafe(handle(kind, rid, payload), loop)

    threading.Thread(target=read, name="osmosis-hf-engine-pipe", daemon=True).start()
    await stopped.wait()
    await engine.close()
