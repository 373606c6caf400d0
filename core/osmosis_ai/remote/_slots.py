"""Run slots and shutdown: ``max_concurrent_rollouts`` slots, a closing flag that stops
waiters, and the grace period a shutdown gives the rollouts in flight."""

from __future__ import annotations

import asyncio

__all__ = ["Slots"]


class Slots:
    """Made inside the running event loop (its events and semaphore belong to it)."""

    def __init__(self, concurrent: int) -> None:
        self._sem = asyncio.Semaphore(concurrent)
        self.closing = asyncio.Event()
        self.hurried = asyncio.Event()

    async def acquire(self) -> bool:
        """Wait for a free slot; ``False`` (no slot held) once the server is closing."""
        if self.closing.is_set():
            return False
        if not self._sem.locked():  # a free slot: no need to watch for shutdown
            await self._sem.acquire()
            return True
        acquire = asyncio.ensure_future(self._sem.acquire())
        closing = asyncio.ensure_future(self.closing.wait())
        try:
            await asyncio.wait({acquire, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            if not acquire.done():
                acquire.cancel()
                await asyncio.gather(acquire, return_exceptions=True)
        got = acquire.done() and not acquire.cancelled()
        if got and self.closing.is_set():
            self._sem.release()
            return False
        return got

    def release(self) -> None:
        self._sem.release()

    async def grace(
        self, drives: list[asyncio.Task[None]], grace: float
    ) -> set[asyncio.Task[None]]:
        """Wait up to ``grace`` seconds (or until hurried) for ``drives``; the rest."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        pending = set(drives)
        hurry = asyncio.ensure_future(self.hurried.wait())
        try:
            while pending and not self.hurried.is_set() and (left := deadline - loop.time()) > 0:
                done, _ = await asyncio.wait(
                    {*pending, hurry}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                pending -= done
        finally:
            hurry.cancel()
        return pending
