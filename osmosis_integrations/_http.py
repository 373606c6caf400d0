"""Per-call OpenAI clients for policy routes.

Every policy call gets its own ``AsyncOpenAI`` client, closed when the call (or its stream) ends:
a client outlives neither the event loop it was used on (Strands runs each synchronous
``agent(...)`` on a fresh loop) nor the sample it routes to. What makes a client expensive is its
TLS context (~25 ms to load the CA bundle), so one context is built once and shared: a client then
costs well under a millisecond.
"""

from __future__ import annotations

import ssl
import threading
from typing import TYPE_CHECKING, Any

from osmosis_ai.rollout import PolicyRoute

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["client_args", "policy_client"]

_ssl_lock = threading.Lock()
_ssl_context: ssl.SSLContext | None = None


def _shared_ssl_context() -> ssl.SSLContext:
    global _ssl_context
    with _ssl_lock:
        if _ssl_context is None:
            try:
                import certifi

                _ssl_context = ssl.create_default_context(cafile=certifi.where())
            except ImportError:  # pragma: no cover - certifi ships with httpx/openai
                _ssl_context = ssl.create_default_context()
        return _ssl_context


def client_args(route: PolicyRoute, *, max_retries: int = 0) -> dict[str, Any]:
    """``AsyncOpenAI(**kwargs)`` arguments for one call to ``route`` (a fresh HTTP client).

    ``max_retries=0``: the agent framework owns retries (Strands' retry strategy, the Agents
    runner's retry settings), so a 429 from the gateway is retried by exactly one layer.
    """
    import openai

    http_client = openai.DefaultAsyncHttpxClient(verify=_shared_ssl_context())
    return {
        "base_url": route.base_url,
        "api_key": route.api_key,
        "max_retries": max_retries,
        "http_client": http_client,
    }


def policy_client(route: PolicyRoute, *, max_retries: int = 0) -> AsyncOpenAI:
    """A fresh ``AsyncOpenAI`` bound to ``route``; close it when the call ends."""
    import openai

    return openai.AsyncOpenAI(**client_args(route, max_retries=max_retries))
