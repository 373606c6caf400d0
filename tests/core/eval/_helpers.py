"""Shared pieces of the eval tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from osmosis_ai.testing import FakeOpenAIServer


def fake_server_factory(script: Any) -> Callable[..., contextlib.AbstractAsyncContextManager[Any]]:
    """An ``endpoint_factory`` for ``run_eval`` that serves ``script`` from a fake server."""

    @contextlib.asynccontextmanager
    async def factory(model: str, sampling: dict[str, Any]) -> AsyncIterator[Any]:
        async with FakeOpenAIServer(script=script) as server:
            yield server

    return factory
