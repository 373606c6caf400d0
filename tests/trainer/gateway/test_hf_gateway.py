"""The HF engine behind the gateway: concurrent clients, token-exact records, multi-turn."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("torch")
openai = pytest.importorskip("openai")

from osmosis_ai.config import SamplingConfig  # noqa: E402
from osmosis_ai.serving.gateway import PolicyGateway  # noqa: E402
from osmosis_trainer.engines import HFEngine  # noqa: E402
from osmosis_trainer.trajectory import build_sequences  # noqa: E402
from tests.trainer.engines._gate import EngineGate  # noqa: E402


async def test_concurrent_clients_get_their_own_token_exact_records(tiny_loaded: Any) -> None:
    engine = HFEngine(tiny_loaded, device="cpu", seed=0)
    EngineGate(engine).hold_until_queued(12)  # batched whatever the thread timing
    sampling = SamplingConfig(max_tokens=8)
    try:
        async with PolicyGateway(engine, sampling=sampling) as gw:

            async def rollout(i: int) -> tuple[str, str]:
                route = gw.route(f"r{i}", "main")
                async with openai.AsyncOpenAI(base_url=route.base_url, api_key="k") as client:
                    out = await client.chat.completions.create(
                        model=route.model,
                        messages=[{"role": "user", "content": f"question {i}"}],
                        max_tokens=500,
                    )
                return f"r{i}", out.choices[0].message.content or ""

            replies = dict(await asyncio.gather(*(rollout(i) for i in range(12))))
            assert engine.stats["batches"] == 1  # the concurrent calls were batched
            tok = tiny_loaded.tokenizer
            for rid, content in replies.items():
                (call,) = (await gw.collect(rid))["main"]
                assert call.request_messages[0]["content"] == f"question {rid[1:]}"
                assert call.trainable and len(call.completion_token_ids or []) <= 8
                ids = list(call.completion_token_ids or [])
                if call.finish_reason == "stop":
                    ids = ids[:-1]
                assert tok.decode(ids, skip_special_tokens=False) == content
                prompt = tok.decode(call.prompt_token_ids)
                assert f"question {rid[1:]}" in prompt
    finally:
        await engine.close()


async def test_multi_turn_with_a_real_tokenizer_merges_or_reports_retokenization(
    tiny_loaded: Any,
) -> None:
    engine = HFEngine(tiny_loaded, device="cpu", seed=1)
    try:
        async with PolicyGateway(engine, sampling=SamplingConfig(max_tokens=6)) as gw:
            route = gw.route("r", "main")
            messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 2 + 3?"}]
            async with openai.AsyncOpenAI(base_url=route.base_url, api_key="k") as client:
                for turn in range(3):
                    out = await client.chat.completions.create(model="p", messages=messages)
                    messages.append(
                        {"role": "assistant", "content": out.choices[0].message.content}
                    )
                    messages.append({"role": "user", "content": f"and then {turn}?"})
            calls = (await gw.collect("r"))["main"]
    finally:
        await engine.close()
    build = build_sequences(calls, decode=lambda ids: tiny_loaded.tokenizer.decode(ids))
    # History is replayed faithfully, so every split can only be a re-tokenisation.
    assert build.merges + len(build.mismatches) == 2
    assert {m.kind for m in build.mismatches} <= {"retokenization"}
    assert sum(s.num_sampled for s in build.sequences) == sum(
        len(c.completion_token_ids or []) for c in calls
    )
