"""In-process delivery of policy calls to a gateway served by the calling event loop."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from osmosis_ai.rollout._local import local_transport, register_local_app, unregister_local_app

URL = "http://127.0.0.1:59999/rollouts/r/samples/main/v1"


def _app(seen: list[str]) -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        seen.append((await request.json())["q"])
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/rollouts/r/samples/main/v1/chat", chat, methods=["POST"])])


async def test_calls_on_the_serving_loop_reach_the_app_without_a_socket() -> None:
    seen: list[str] = []
    register_local_app("http://127.0.0.1:59999", _app(seen))
    try:
        transport = local_transport(URL)
        assert transport is not None and local_transport(URL) is transport  # made once
        # Nothing listens on port 59999: only the in-process transport can answer.
        async with httpx.AsyncClient(transport=transport) as client:
            r = await client.post(URL + "/chat", json={"q": "hi"})
        assert r.status_code == 200 and seen == ["hi"]
        # Another loop (a thread's) must go over the network instead.
        other: list[object] = []
        thread = threading.Thread(target=lambda: other.append(asyncio.run(_transport())))
        thread.start()
        thread.join()
        assert other == [None]
    finally:
        unregister_local_app("http://127.0.0.1:59999")
    assert local_transport(URL) is None


async def _transport() -> object:
    return local_transport(URL)


async def test_disabled_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    register_local_app("http://127.0.0.1:59999", _app([]))
    try:
        monkeypatch.setenv("OSMOSIS_LOCAL_GATEWAY", "0")
        assert local_transport(URL) is None
    finally:
        unregister_local_app("http://127.0.0.1:59999")
