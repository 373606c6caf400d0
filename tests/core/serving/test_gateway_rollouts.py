"""The gateway tells an engine that keeps per-rollout state when a rollout has been collected."""

from __future__ import annotations

import httpx
import pytest

from osmosis_ai.serving import FreesIdleMemory, KeepsRollouts
from osmosis_ai.testing import ScriptedEngine

pytest.importorskip("fastapi")

from osmosis_ai.serving.gateway import PolicyGateway  # noqa: E402

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


class RememberingEngine(ScriptedEngine):
    def __init__(self, replies: list[str]) -> None:
        super().__init__(replies)
        self.forgotten: list[str] = []

    def forget_rollout(self, rollout_id: str) -> None:
        self.forgotten.append(rollout_id)


async def test_collecting_a_rollout_tells_the_engine_to_forget_it() -> None:
    engine = RememberingEngine(["ok", "ok"])
    assert isinstance(engine, KeepsRollouts)
    async with PolicyGateway(engine) as gw, httpx.AsyncClient() as c:
        for rollout in ("r1", "r2"):
            resp = await c.post(f"{gw.url}/rollouts/{rollout}/samples/main/v1/chat/completions",
                                json=BODY)
            assert resp.status_code == 200, resp.text
        assert engine.forgotten == []  # nothing is dropped while a rollout may still call
        assert len((await gw.collect("r1"))["main"]) == 1
        assert engine.forgotten == ["r1"]


async def test_engines_without_rollout_state_are_left_alone() -> None:
    engine = ScriptedEngine(["ok"])
    assert not isinstance(engine, KeepsRollouts)
    async with PolicyGateway(engine) as gw:
        assert await gw.collect("r1") == {}


class ReleasingEngine(ScriptedEngine):
    def __init__(self, replies: list[str]) -> None:
        super().__init__(replies)
        self.released = 0

    async def release_idle_memory(self) -> None:
        self.released += 1


def test_the_gateway_passes_a_release_on_to_an_engine_that_can() -> None:
    import asyncio

    engine = ReleasingEngine([])
    assert isinstance(engine, FreesIdleMemory)
    assert not isinstance(ScriptedEngine([]), FreesIdleMemory)
    with PolicyGateway(engine) as gw:  # its own thread and loop, as in a training job
        asyncio.run(gw.release_idle_memory())
        assert isinstance(gw, FreesIdleMemory)
    assert engine.released == 1
    with PolicyGateway(ScriptedEngine([])) as plain:
        asyncio.run(plain.release_idle_memory())  # a no-op
