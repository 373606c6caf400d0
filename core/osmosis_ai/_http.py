"""Keep-alive HTTP clients per target, shared by the policy callers.

``ClientPool`` hands out ``httpx.AsyncClient`` instances of one connection each, checked out
for a request and returned after it: calls reuse open connections (a client per request pays
a connection set-up on every call), and concurrent callers never share one httpcore pool,
whose per-request bookkeeping made a single shared client cost more CPU per call than even a
client per request at 16 concurrent callers (``BENCHMARKS.md``, ``httpclient``).

``pool_for(url)`` gives the pool of a URL's origin in the running event loop. The pools of a
loop are closed when ``asyncio.run`` (or any runner) finalises the loop's async generators.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import weakref
from collections.abc import AsyncIterator
from typing import Any

import httpx

__all__ = ["ClientPool", "pool_for"]


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Built once: loading the CA bundle takes ~25 ms.
    return ssl.create_default_context()


class ClientPool:
    """Idle single-connection clients for one target; :meth:`client` checks one out."""

    def __init__(self, *, headers: dict[str, str] | None = None) -> None:
        self._headers = dict(headers or {})
        self._idle: list[httpx.AsyncClient] = []
        self._closed = False

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client for one request; it goes back to the pool afterwards (closed if the pool
        was closed meanwhile or the request failed at the transport)."""
        client = self._idle.pop() if self._idle else self._new()
        healthy = False
        try:
            yield client
            healthy = True
        finally:
            if healthy and not self._closed:
                self._idle.append(client)
            else:
                await client.aclose()

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """``client.request(...)`` on a checked-out client (``timeout=`` per request)."""
        async with self.client() as client:
            return await client.request(method, url, **kwargs)

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for client in idle:
            await client.aclose()

    def _new(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            headers=self._headers,
            verify=_ssl_context(),
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )


class _LoopPools:
    """The pools of one event loop, closed when the loop finalises its async generators."""

    def __init__(self) -> None:
        self.pools: dict[str, ClientPool] = {}
        self._closer = self._close_at_shutdown()

    async def start(self) -> None:
        # Iterating the generator once registers it with the running loop, whose shutdown
        # (asyncio.run, asyncio.Runner) calls aclose() on it: the finally block runs then.
        await anext(self._closer)

    async def _close_at_shutdown(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            pools, self.pools = list(self.pools.values()), {}
            for pool in pools:
                await pool.aclose()


_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopPools] = (
    weakref.WeakKeyDictionary()
)


async def pool_for(url: str) -> ClientPool:
    """The running loop's pool for the origin (scheme, host, port) of ``url``."""
    loop = asyncio.get_running_loop()
    pools = _by_loop.get(loop)
    if pools is None:
        pools = _by_loop[loop] = _LoopPools()
        await pools.start()
    origin = httpx.URL(url)
    key = f"{origin.scheme}://{origin.host}:{origin.port}"
    pool = pools.pools.get(key)
    if pool is None:
        pool = pools.pools[key] = ClientPool()
    return pool
