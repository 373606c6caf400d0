"""Policy calls reuse keep-alive connections: one pool per target and event loop."""

from __future__ import annotations

import asyncio

from osmosis_ai._http import ClientPool, pool_for
from osmosis_ai.rollout._chat import chat_completion
from osmosis_ai.testing import FakeOpenAIServer

USER = [{"role": "user", "content": "2+2?"}]


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


def test_pools_close_when_the_loop_shuts_down() -> None:
    seen: list[ClientPool] = []

    async def use() -> None:
        async with FakeOpenAIServer(script=["4"]) as server:
            route = server.route("r1", "main")
            await chat_completion(route, USER)
            seen.append(await pool_for(route.base_url))
            assert seen[0]._idle  # a client kept for the next call

    asyncio.run(use())
    assert seen[0]._closed and not seen[0]._idle


async def test_a_client_that_failed_is_not_reused() -> None:
    pool = ClientPool()
    try:
        async with pool.client():
            raise OSError("connection reset")
    except OSError:
        pass
    assert pool._idle == []
    await pool.aclose()
