"""Multi-turn tool conversations recorded by the gateway become token-exact sequences."""

from __future__ import annotations

import json
from typing import Any

import pytest

from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import ScriptedEngine, tool_call
from osmosis_trainer.trajectory import build_sequences

openai = pytest.importorskip("openai")

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


async def _agent_loop(
    client: Any, model: str, messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A minimal agent: call the model, run tool calls, repeat until a text answer."""
    for _ in range(5):
        out = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        msg = out.choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            return messages
        for tc in msg.tool_calls:
            args = json.loads(tc.function.arguments)
            messages.append(
                {"role": "tool", "tool_call_id": tc.id, "content": str(args["a"] + args["b"])}
            )
    raise AssertionError("agent did not finish")


async def test_multi_turn_tool_conversation_merges_into_one_sequence() -> None:
    engine = ScriptedEngine(per_sample=False, script=[tool_call("add", a=2, b=3), tool_call("add", a=5, b=10), "15"])
    async with PolicyGateway(engine) as gw:
        route = gw.route("r", "main")
        async with openai.AsyncOpenAI(base_url=route.base_url, api_key="k") as client:
            history = await _agent_loop(
                client, route.model, [{"role": "user", "content": "2 + 3 + 10?"}]
            )
        calls = (await gw.collect("r"))["main"]
    assert len(calls) == 3 and history[-1]["content"] == "15"
    build = build_sequences(calls, decode=engine.tokenizer.decode)
    assert build.merges == 2 and build.mismatches == []
    (seq,) = build.sequences
    assert seq.call_ids == [c.call_id for c in calls]
    # Mask 1 exactly over each call's sampled ids, in place; everything else 0.
    expected_mask = [0] * len(seq.token_ids)
    for c in calls:
        start = len(c.prompt_token_ids or [])
        assert (
            seq.token_ids[start : start + len(c.completion_token_ids or [])]
            == c.completion_token_ids
        )
        for j, lp in enumerate(c.logprobs or []):
            expected_mask[start + j] = 1
            assert seq.sampler_logprobs[start + j] == lp
    assert seq.loss_mask == expected_mask
    assert seq.token_ids[: len(calls[-1].prompt_token_ids or [])] == calls[-1].prompt_token_ids
    # The tool results are in the sequence, masked out.
    unmasked = [t for t, m in zip(seq.token_ids, seq.loss_mask, strict=True) if m == 0]
    assert "<tool_response>" not in engine.tokenizer.decode(
        unmasked
    )  # FakeTokenizer uses role tool
    assert "<|im_start|>tool\n5<|im_end|>" in engine.tokenizer.decode(unmasked)


async def test_altered_history_splits_and_is_counted() -> None:
    engine = ScriptedEngine(per_sample=False, script=[tool_call("add", a=2, b=3), "5"])
    async with PolicyGateway(engine) as gw:
        route = gw.route("r", "main")
        async with openai.AsyncOpenAI(base_url=route.base_url, api_key="k") as client:
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": "You add numbers."},
                {"role": "user", "content": "2 + 3?"},
            ]
            first = await client.chat.completions.create(model="p", messages=messages, tools=TOOLS)
            msg = first.choices[0].message
            # The framework rewrites history: a summarised system prompt, re-serialised args.
            altered = [
                {"role": "system", "content": "Add."},
                messages[1],
                msg.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "5"},
            ]
            await client.chat.completions.create(model="p", messages=altered, tools=TOOLS)
        calls = (await gw.collect("r"))["main"]
    build = build_sequences(calls, decode=engine.tokenizer.decode)
    assert len(build.sequences) == 2 and build.merges == 0
    assert [m.kind for m in build.mismatches] == ["template_change"]
    assert build.metrics()["trajectory/mismatches"] == 1.0
    for seq, call in zip(build.sequences, calls, strict=True):
        assert seq.token_ids == (call.prompt_token_ids or []) + (call.completion_token_ids or [])
