"""Per-call OpenAI clients over one connection pool per event loop, closed with the loop."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from typing import Any

import osmosis_integrations._http as http
from osmosis_ai.rollout.scope import PolicyRoute
from osmosis_ai.testing import FakeOpenAIServer


async def _ask(route: PolicyRoute) -> str:
    client = await http.policy_client(route)
    reply = await client.chat.completions.create(
        model=route.model, messages=[{"role": "user", "content": "x"}]
    )
    return reply.choices[0].message.content or ""


async def test_calls_on_one_loop_share_connections_and_clients() -> None:
    async with FakeOpenAIServer(script=["a", "b", "c", "d"]) as server:
        r1, r2 = server.route("r", "one"), server.route("r", "two")
        assert [await _ask(r1), await _ask(r1), await _ask(r2), await _ask(r2)] == list("abab")
        assert server.connections == 1  # keep-alive reused across calls and samples
        assert await http.policy_client(r1) is await http.policy_client(r1)
        assert await http.policy_client(r1) is not await http.policy_client(r2)
        assert (await http.policy_client(r1))._client is await http.loop_http_client()


def test_each_loop_gets_its_own_pool_closed_when_the_loop_ends() -> None:
    with FakeOpenAIServer(script=["a", "b"]) as server:
        route = server.route("r", "main")
        seen: list[tuple[Any, weakref.ref[Any]]] = []

        async def call() -> str:
            seen.append((await http.loop_http_client(), weakref.ref(asyncio.get_running_loop())))
            return await _ask(route)

        def in_thread() -> None:  # what Strands does for every synchronous agent(...) call
            assert asyncio.run(call()) == "a"
            assert asyncio.run(call()) == "b"

        worker = threading.Thread(target=in_thread)
        worker.start()
        worker.join(30)
    (first, loop1), (second, loop2) = seen
    assert first is not second and first.is_closed and second.is_closed
    gc.collect()
    assert loop1() is None and loop2() is None  # no pool keeps a dead loop alive


async def test_clients_per_loop_are_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(http, "_MAX_CLIENTS_PER_LOOP", 3)
    routes = [
        PolicyRoute(base_url=f"http://127.0.0.1:9/rollouts/r{i}/samples/main/v1") for i in range(5)
    ]
    clients = [await http.policy_client(r) for r in routes]
    pool = await http._loop_pool()
    assert list(pool.clients.values()) == clients[2:]
