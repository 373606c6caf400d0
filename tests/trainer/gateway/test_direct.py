"""ctx.chat to a gateway on the same event loop skips HTTP, with the same answers and records."""

from __future__ import annotations

import asyncio

import pytest

from osmosis_ai.errors import PolicyCallError
from osmosis_ai.rollout import PolicyRoute
from osmosis_ai.rollout._chat import chat_completion
from osmosis_ai.rollout._local import local_direct
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_trainer.testing import FakeEngine

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


async def _call_both_ways(gw: PolicyGateway, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    route = gw.route("r1", "main")
    assert local_direct(route.base_url + "/chat/completions") is not None
    direct = await chat_completion(route, MESSAGES, max_tokens=8, return_token_ids=True)
    monkeypatch.setenv("OSMOSIS_LOCAL_GATEWAY", "0")
    assert local_direct(route.base_url + "/chat/completions") is None
    over_http = await chat_completion(route, MESSAGES, max_tokens=8, return_token_ids=True)
    monkeypatch.delenv("OSMOSIS_LOCAL_GATEWAY")
    return [direct.raw, over_http.raw]


async def test_direct_and_http_calls_answer_and_record_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with PolicyGateway(FakeEngine(script=lambda req: "5", cycle=True)) as gw:
        direct, over_http = await _call_both_ways(gw, monkeypatch)
        calls = (await gw.collect("r1"))["main"]
    strip = {"id", "created"}
    assert {k: v for k, v in direct.items() if k not in strip} == {
        k: v for k, v in over_http.items() if k not in strip
    }
    assert len(calls) == 2
    assert calls[0].request_messages == calls[1].request_messages == MESSAGES
    assert calls[0].completion_token_ids == calls[1].completion_token_ids


async def test_direct_calls_keep_auth_validation_and_retries() -> None:
    engine = FakeEngine(script=lambda req: "ok", cycle=True, delay_s=0.4)
    async with PolicyGateway(engine, api_key="k", swap_wait_s=0.05, retry_after_s=1) as gw:
        good = gw.route("r1", "main")
        wrong = PolicyRoute(base_url=good.base_url, api_key="nope", model=good.model)
        with pytest.raises(PolicyCallError) as denied:
            await chat_completion(wrong, MESSAGES)
        assert denied.value.status_code == 401
        with pytest.raises(PolicyCallError) as invalid:
            await chat_completion(good, MESSAGES, temperature="hot")
        assert invalid.value.status_code == 400 and "temperature" in str(invalid.value)
        # During a long swap the gateway answers 429 + Retry-After; the direct call retries.
        swap = asyncio.create_task(gw.swap_adapter("/a", 3))
        await asyncio.sleep(0.05)
        reply = await chat_completion(good, MESSAGES)
        await swap
        assert reply.message["content"] == "ok" and reply.raw["model"] == "osmosis-policy@v3"
        assert gw.stats["rejected_during_swap"] >= 1
