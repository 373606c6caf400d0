"""ctx.chat against the gateway: auth, validation and 429 retries during a weight swap."""

from __future__ import annotations

import asyncio

import pytest

from osmosis_ai.errors import PolicyCallError
from osmosis_ai.rollout._chat import chat_completion
from osmosis_ai.rollout.scope import PolicyRoute
from osmosis_ai.serving.gateway import PolicyGateway
from tests.trainer.gateway._gated import GatedEngine, watch_admissions

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


async def test_chat_calls_keep_auth_validation_and_retries() -> None:
    engine = GatedEngine(script=lambda req: "ok", cycle=True)
    engine.release_generation.set()
    engine.release_load.clear()  # the swap's load runs until the test lets it finish
    async with PolicyGateway(engine, api_key="k", swap_wait_s=0.05, retry_after_s=1) as gw:
        admissions = watch_admissions(gw)
        good = gw.route("r1", "main")
        wrong = PolicyRoute(base_url=good.base_url, api_key="nope", model=good.model)
        with pytest.raises(PolicyCallError) as denied:
            await chat_completion(wrong, MESSAGES)
        assert denied.value.status_code == 401
        with pytest.raises(PolicyCallError) as invalid:
            await chat_completion(good, MESSAGES, temperature="hot")
        assert invalid.value.status_code == 400 and "temperature" in str(invalid.value)
        # During a long swap the gateway answers 429 + Retry-After; the call retries.
        swap = asyncio.create_task(gw.swap_adapter("/a", 3))
        await engine.loading.wait()
        call = asyncio.create_task(chat_completion(good, MESSAGES))
        await admissions["busy"].wait()  # refused once while the load runs
        engine.release_load.set()
        reply = await call
        await swap
        assert reply.message["content"] == "ok" and reply.raw["model"] == "osmosis-policy@v3"
        assert gw.stats["rejected_during_swap"] >= 1
