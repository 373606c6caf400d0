"""OpenAI clients for policy routes: one per call, over one connection pool per event loop.

Every policy call gets its own ``AsyncOpenAI`` (the route differs per sample and may change
between calls), but the HTTP connection pool under it is shared by all calls made on the same
event loop, so consecutive turns reuse keep-alive connections to the gateway instead of paying a
DNS lookup, a TCP handshake and a TLS context per call.

A pool never outlives its loop, which is what breaks a shared client when Strands runs each
synchronous ``agent(...)`` on a fresh loop: pools are keyed by loop (weakly), and each pool is
closed inside its own loop when the loop shuts down its async generators (``asyncio.run`` and
``asyncio.Runner`` do), through a small guard generator started on that loop.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from osmosis_ai.rollout.scope import PolicyRoute

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["loop_http_client", "policy_client"]

_lock = threading.Lock()
_ssl_context: ssl.SSLContext | None = None


_MAX_CLIENTS_PER_LOOP = 512


class _LoopPool:
    """The HTTP client of one event loop, the guard that closes it with the loop, and the
    ``AsyncOpenAI`` wrappers made over it (one per route, least recently used dropped first)."""

    def __init__(self, http: Any) -> None:
        self.http = http
        self.guard: AsyncGenerator[None, None] | None = None
        self.clients: OrderedDict[tuple[str, str, int], AsyncOpenAI] = OrderedDict()


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopPool] = (
    weakref.WeakKeyDictionary()
)


def _shared_ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~25 ms: do it once, not per client.
    global _ssl_context
    with _lock:
        if _ssl_context is None:
            try:
                import certifi

                _ssl_context = ssl.create_default_context(cafile=certifi.where())
            except ImportError:  # pragma: no cover - certifi ships with httpx/openai
                _ssl_context = ssl.create_default_context()
        return _ssl_context


async def _close_with_loop(
    pool: _LoopPool, loop: weakref.ref[asyncio.AbstractEventLoop]
) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await pool.http.aclose()
        # The guard refers to its loop (asyncio's finalizer hook): drop both so the loop can be
        # garbage-collected.
        pool.guard = None
        pool.clients.clear()
        dead = loop()
        with _lock:
            if dead is not None and _pools.get(dead) is pool:
                del _pools[dead]


async def _loop_pool() -> _LoopPool:
    """The pool of the running event loop (made, with its guard, on first use)."""
    import openai

    loop = asyncio.get_running_loop()
    ssl_context = _shared_ssl_context()
    with _lock:
        pool = _pools.get(loop)
        if pool is not None and not pool.http.is_closed:
            return pool
        pool = _LoopPool(openai.DefaultAsyncHttpxClient(verify=ssl_context))
        _pools[loop] = pool
    # A loop that already shut down its generators (the Agents SDK's run_sync keeps its loop
    # and does that after every run) would warn and never close a new guard: skip it there;
    # the pool is then closed when it is garbage-collected with the loop. (The flag is
    # asyncio's private one: no public API tells whether a loop shut its generators down.)
    if not getattr(loop, "_asyncgens_shutdown_called", False):
        guard = _close_with_loop(pool, weakref.ref(loop))
        await guard.__anext__()
        pool.guard = guard
    return pool


async def loop_http_client() -> Any:
    """The ``httpx2.AsyncClient`` shared by policy calls on the running event loop."""
    return (await _loop_pool()).http


async def policy_client(route: PolicyRoute, *, max_retries: int = 0) -> AsyncOpenAI:
    """An ``AsyncOpenAI`` bound to ``route`` over the running loop's shared pool (made once per
    route and loop). Do not close it: that would close the shared pool.

    ``max_retries=0`` leaves retries to the agent framework (Strands' retry strategy, the
    Agents runner's retry settings), so a 429 from the gateway is retried by exactly one layer.
    """
    import openai

    pool = await _loop_pool()
    key = (route.base_url, route.api_key, max_retries)
    client = pool.clients.get(key)
    if client is None:
        client = openai.AsyncOpenAI(
            base_url=route.base_url,
            api_key=route.api_key,
            max_retries=max_retries,
            http_client=pool.http,
        )
        pool.clients[key] = client
        if len(pool.clients) > _MAX_CLIENTS_PER_LOOP:
            pool.clients.popitem(last=False)
    else:
        pool.clients.move_to_end(key)
    return client
