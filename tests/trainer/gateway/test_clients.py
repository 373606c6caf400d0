"""The OpenAI Python client and LiteLLM talk to the gateway (tools and streaming)."""

from __future__ import annotations

import json
import os

import pytest

from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import FakeReply, ScriptedEngine, tool_call
from tests.trainer._tools import add_tool

openai = pytest.importorskip("openai")

TOOLS = [add_tool()]
MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


def _script() -> list[FakeReply | str]:
    return [tool_call("add", a=2, b=3), "The answer is 5."] * 2 + [tool_call("add", a=2, b=3)]


async def test_openai_client_tools_and_streaming() -> None:
    engine = ScriptedEngine(per_sample=False, script=_script())
    async with PolicyGateway(engine) as gw:
        route = gw.route("r1", "main")
        async with openai.AsyncOpenAI(base_url=route.base_url, api_key=route.api_key) as client:
            first = await client.chat.completions.create(
                model=route.model, messages=MESSAGES, tools=TOOLS, logprobs=True
            )
            choice = first.choices[0]
            assert first.model == "osmosis-policy@v0"
            assert choice.finish_reason == "tool_calls"
            call = choice.message.tool_calls[0]
            assert call.function.name == "add"
            assert json.loads(call.function.arguments) == {"a": 2, "b": 3}
            assert choice.logprobs is not None and len(choice.logprobs.content) > 0
            assert first.usage is not None and first.usage.total_tokens > 0
            history = [
                *MESSAGES,
                choice.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "5"},
            ]
            final = await client.chat.completions.create(
                model=route.model, messages=history, tools=TOOLS
            )
            assert final.choices[0].message.content == "The answer is 5."

            stream = await client.chat.completions.create(
                model=route.model,
                messages=MESSAGES,
                tools=TOOLS,
                stream=True,
                stream_options={"include_usage": True},
            )
            names, args, finish, usage = [], "", None, None
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage
                for ch in chunk.choices:
                    for tc in ch.delta.tool_calls or []:
                        if tc.function and tc.function.name:
                            names.append(tc.function.name)
                        args += (tc.function.arguments or "") if tc.function else ""
                    finish = ch.finish_reason or finish
            assert names == ["add"] and json.loads(args) == {"a": 2, "b": 3}
            assert finish == "tool_calls" and usage is not None and usage.completion_tokens > 0

            text_stream = await client.chat.completions.create(
                model=route.model, messages=history, stream=True
            )
            text = "".join(
                [c.choices[0].delta.content or "" async for c in text_stream if c.choices]
            )
            assert text == "The answer is 5."
            models = await client.models.list()
            assert "osmosis-policy@v0" in [m.id for m in models.data]
        calls = (await gw.collect("r1"))["main"]
        assert [c.finish_reason for c in calls] == ["tool_calls", "stop", "tool_calls", "stop"]
        assert all(c.trainable for c in calls)


def test_openai_sync_client_against_thread_hosted_gateway() -> None:
    engine = ScriptedEngine(per_sample=False, script=["hello"])
    with PolicyGateway(engine) as gw:
        route = gw.route("r", "main")
        with openai.OpenAI(base_url=route.base_url, api_key=route.api_key) as client:
            out = client.chat.completions.create(model=route.model, messages=MESSAGES)
        assert out.choices[0].message.content == "hello"


async def test_litellm_tools_and_streaming(litellm_worker_stopped: None) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm")
    engine = ScriptedEngine(per_sample=False, script=_script())
    async with PolicyGateway(engine) as gw:
        route = gw.route("r2", "main")
        for model in ("openai/osmosis-policy", "hosted_vllm/osmosis-policy"):
            resp = await litellm.acompletion(
                model=model,
                messages=MESSAGES,
                tools=TOOLS,
                api_base=route.base_url,
                api_key=route.api_key,
            )
            tc = resp.choices[0].message.tool_calls[0]
            assert tc.function.name == "add" and json.loads(tc.function.arguments) == {
                "a": 2,
                "b": 3,
            }
            assert resp.choices[0].finish_reason == "tool_calls"
            stream = await litellm.acompletion(
                model=model,
                messages=MESSAGES,
                api_base=route.base_url,
                api_key=route.api_key,
                stream=True,
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            assert text == "The answer is 5."
        stream = await litellm.acompletion(
            model="openai/osmosis-policy",
            messages=MESSAGES,
            tools=TOOLS,
            api_base=route.base_url,
            api_key=route.api_key,
            stream=True,
        )
        chunks = [c async for c in stream]
        rebuilt = litellm.stream_chunk_builder(chunks, messages=MESSAGES)
        tc = rebuilt.choices[0].message.tool_calls[0]
        assert tc.function.name == "add" and json.loads(tc.function.arguments) == {"a": 2, "b": 3}
        calls = (await gw.collect("r2"))["main"]
        assert len(calls) == 5 and all(c.trainable for c in calls)
