"""Deterministic control of the HF engine's worker thread in tests.

Batching and admission depend on when the worker thread looks at its queue. Tests that
assert how requests were batched must not depend on that timing (a loaded CI machine
reorders threads), so they hold the worker at a known point with events instead of
polling with deadlines. The waits below are generous safety nets against a hang only:
they never decide a pass; reaching one fails the test.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

__all__ = ["EngineGate"]

_HANG_S = 120.0


class _HeldQueue(queue.Queue):  # type: ignore[type-arg]
    """A queue whose readers wait until ``count`` items were put, then behave normally."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self._count = count
        self._put_total = 0
        self.filled = threading.Event()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        with self.mutex:
            self._put_total += 1
            if self._put_total >= self._count:
                self.filled.set()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if not self.filled.wait(_HANG_S):
            raise AssertionError(f"the test never queued {self._count} items")
        return super().get(block, timeout)


class EngineGate:
    """Test control points of one :class:`HFEngine` (install before its first request).

    * ``hold_until_queued(n)``: the worker starts no batch before ``n`` items are queued,
      so all ``n`` land in one batch (``max_batch_size`` permitting), whatever the timing.
    * ``pause_at_admission()``: the worker stops at the first admission point of a running
      batch (between two decoding steps) until :meth:`release`; ``await reached()``.
    * ``await submitted(n)``: ``n`` items (requests or adapter loads) were queued.
    """

    def __init__(self, engine: Any) -> None:
        assert engine._worker is None, "install the gate before the engine's first request"
        self._engine = engine
        self._reached = threading.Event()
        self._release = threading.Event()
        self._submitted: list[Any] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        original_submit = engine._submit

        def submit(item: Any) -> None:  # runs on the event loop (called by async methods)
            original_submit(item)
            self._submitted.append(item)
            for n, fut in list(self._waiters):
                if len(self._submitted) >= n and not fut.done():
                    fut.set_result(None)

        engine._submit = submit

    def hold_until_queued(self, count: int) -> None:
        self._engine._queue = _HeldQueue(count)

    def pause_at_admission(self) -> None:
        original_admit = self._engine._admit

        def admit(active: int) -> Any:
            if not self._reached.is_set():
                self._reached.set()
                if not self._release.wait(_HANG_S):
                    raise AssertionError("the test never released the engine")
            return original_admit(active)

        self._engine._admit = admit

    async def reached(self) -> None:
        assert await asyncio.to_thread(self._reached.wait, _HANG_S), "the batch never started"

    def release(self) -> None:
        self._release.set()

    async def submitted(self, count: int) -> None:
        if len(self._submitted) >= count:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((count, fut))
        await asyncio.wait_for(fut, _HANG_S)

    @property
    def items(self) -> list[Any]:
        return list(self._submitted)
