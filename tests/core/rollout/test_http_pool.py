"""Policy calls reuse keep-alive connections: one shared client per event loop."""

from __future__ import annotations

import asyncio
import gc
import weakref

import httpx

from osmosis_ai._http import loop_client
from osmosis_ai.chat import Message
from osmosis_ai.rollout._chat import chat_completion
from osmosis_ai.testing import FakeOpenAIServer

USER: list[Message] = [{"role": "user", "content": "2+2?"}]


async def test_sequential_calls_share_one_connection() -> None:
    async with FakeOpenAIServer(script=["4"] * 5) as server:
        route = server.route("r1", "main")
        for _ in range(5):
            reply = await chat_completion(route, USER)
            assert reply.message["content"] == "4"
        assert server.connections == 1


async def test_concurrent_calls_get_a_connection_each_then_reuse_them() -> None:
    async with FakeOpenAIServer(script=["4"] * 4) as server:
        routes = [server.route(f"r{i}", "main") for i in range(3)]
        await asyncio.gather(*(chat_completion(r, USER) for r in routes))
        opened = server.connections
        assert 1 <= opened <= 3
        await asyncio.gather(*(chat_completion(r, USER) for r in routes))
        assert server.connections == opened


def test_each_loop_gets_its_own_client_closed_when_the_loop_ends() -> None:
    seen: list[tuple[httpx.AsyncClient, weakref.ref[asyncio.AbstractEventLoop]]] = []

    async def use() -> None:
        async with FakeOpenAIServer(script=["4"]) as server:
            await chat_completion(server.route("r1", "main"), USER)
            client = await loop_client()
            assert client is await loop_client() and not client.is_closed
            seen.append((client, weakref.ref(asyncio.get_running_loop())))

    asyncio.run(use())
    asyncio.run(use())
    (first, loop1), (second, loop2) = seen
    assert first is not second and first.is_closed and second.is_closed
    gc.collect()
    assert loop1() is None and loop2() is None  # no client keeps a dead loop alive


def test_a_loop_that_shut_its_generators_down_still_gets_a_client() -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(loop.shutdown_asyncgens())
        client = loop.run_until_complete(loop_client())
        assert not client.is_closed
        loop.run_until_complete(client.aclose())
    finally:
        loop.close()
