"""FakeOpenAIServer: a scripted OpenAI-compatible server that records like the gateway."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from osmosis_ai.rollout.scope import PolicyEndpoint
from osmosis_ai.testing import (
    FakeOpenAIServer,
    FakeRequest,
    http_error,
    rate_limited,
    reply,
    text,
    tool_call,
)

USER = [{"role": "user", "content": "What is 2 + 3?"}]


def _client(
    server: FakeOpenAIServer, rollout: str = "r1", sample: str = "main"
) -> openai.AsyncOpenAI:
    route = server.route(rollout, sample)
    return openai.AsyncOpenAI(base_url=route.base_url, api_key=route.api_key, max_retries=0)


def test_is_a_policy_endpoint_with_scoped_routes() -> None:
    with FakeOpenAIServer(script=["hi"]) as server:
        assert isinstance(server, PolicyEndpoint)
        route = server.route("r-7", "agent-a")
        assert route.base_url == f"{server.url}/rollouts/r-7/samples/agent-a/v1"
        assert route.model == "osmosis-policy"
        models = httpx.get(route.base_url + "/models").json()
        assert "osmosis-policy" in [m["id"] for m in models["data"]]


async def test_non_streaming_tool_call_then_text_records_trainable_calls() -> None:
    async with FakeOpenAIServer(script=[tool_call("add", a=2, b=3), "5"]) as server:
        async with _client(server) as client:
            first = await client.chat.completions.create(
                model="osmosis-policy",
                messages=USER,
                logprobs=True,
                extra_body={"return_token_ids": True},
            )
            call = first.choices[0].message.tool_calls[0]
            assert first.choices[0].finish_reason == "tool_calls"
            assert call.function.name == "add"
            assert json.loads(call.function.arguments) == {"a": 2, "b": 3}
            history = [
                *USER,
                first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "5"},
            ]
            second = await client.chat.completions.create(model="osmosis-policy", messages=history)
            assert second.choices[0].message.content == "5"
            assert second.choices[0].logprobs is None  # not requested
        calls = await server.collect("r1")
    assert list(calls) == ["main"]
    c1, c2 = calls["main"]
    assert c1.call_id == first.id and c1.rollout_id == "r1" and c1.sample_id == "main"
    assert c1.trainable and c2.trainable
    assert c1.tool_calls[0].id == call.id
    # token data in the reply equals what was recorded
    assert first.model_extra["prompt_token_ids"] == c1.prompt_token_ids
    assert first.choices[0].model_extra["token_ids"] == c1.completion_token_ids
    assert [t.logprob for t in first.choices[0].logprobs.content] == c1.logprobs
    # verbatim history: turn 2's prompt extends turn 1's prompt + completion
    assert c2.prompt_token_ids[: len(c1.prompt_token_ids)] == c1.prompt_token_ids
    assert await server.collect("r1") == {}  # collect pops
    assert len(server.calls) == 2  # but the log keeps everything


async def test_streaming_reassembles_text_tool_calls_and_usage() -> None:
    script = [
        reply("let me add", [("add", {"a": 1, "b": 2}), ("mul", {"a": 3, "b": 4})]),
        "3 and 12",
    ]
    async with FakeOpenAIServer(script=script) as server:
        async with _client(server) as client:
            stream = await client.chat.completions.create(
                model="m",
                messages=USER,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"return_token_ids": True},
            )
            content, args, names, finish, usage, token_ids = "", {}, {}, None, None, []
            prompt_ids = None
            async for chunk in stream:
                if prompt_ids is None:
                    prompt_ids = (chunk.model_extra or {}).get("prompt_token_ids")
                if not chunk.choices:
                    usage = chunk.usage
                    continue
                choice = chunk.choices[0]
                content += choice.delta.content or ""
                token_ids += (choice.model_extra or {}).get("token_ids") or []
                for tc in choice.delta.tool_calls or []:
                    if tc.function.name:
                        names[tc.index] = tc.function.name
                    args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
                finish = choice.finish_reason or finish
        [record] = (await server.collect("r1"))["main"]
    assert content == "let me add" and finish == "tool_calls"
    assert names == {0: "add", 1: "mul"}
    assert {i: json.loads(a) for i, a in args.items()} == {0: {"a": 1, "b": 2}, 1: {"a": 3, "b": 4}}
    assert usage is not None and usage.completion_tokens == len(record.completion_token_ids)
    assert prompt_ids == record.prompt_token_ids and token_ids == record.completion_token_ids


async def test_scripted_429_and_fail_next_then_recovery() -> None:
    async with FakeOpenAIServer(script=[rate_limited(retry_after=0.0), "ok", "again"]) as server:
        async with _client(server) as client:
            with pytest.raises(openai.RateLimitError):
                await client.chat.completions.create(model="m", messages=USER)
            server.fail_next(2)
            for _ in range(2):
                with pytest.raises(openai.RateLimitError) as err:
                    await client.chat.completions.create(model="m", messages=USER)
                assert err.value.response.headers["retry-after"] == "0"
            # injected failures did not consume the script
            ok = await client.chat.completions.create(model="m", messages=USER)
            assert ok.choices[0].message.content == "ok"
        calls = await server.collect("r1")
    assert [c.response_message["content"] for c in calls["main"]] == ["ok"]  # 429s not recorded
    assert len(server.requests) == 4


async def test_exhausted_script_and_http_error_fail_loudly() -> None:
    async with FakeOpenAIServer(script=[http_error(500, "boom")]) as server:
        async with _client(server) as client:
            with pytest.raises(openai.InternalServerError, match="boom"):
                await client.chat.completions.create(model="m", messages=USER)
            with pytest.raises(openai.BadRequestError, match="script exhausted"):
                await client.chat.completions.create(model="m", messages=USER)


async def test_callable_script_sees_the_request_per_sample() -> None:
    seen: list[FakeRequest] = []

    def script(req: FakeRequest) -> str:
        seen.append(req)
        return f"{req.sample_id}#{req.index}:{req.last_user_text}"

    async with FakeOpenAIServer(script=script) as server:
        async with _client(server, "r9", "b") as client:
            r = await client.chat.completions.create(model="m", messages=USER, temperature=0.3)
            r2 = await client.chat.completions.create(model="m", messages=USER)
    assert r.choices[0].message.content == "b#0:What is 2 + 3?"
    assert r2.choices[0].message.content == "b#1:What is 2 + 3?"
    assert seen[0].rollout_id == "r9" and seen[0].body["temperature"] == 0.3


async def test_concurrent_samples_walk_their_own_scripts() -> None:
    async with FakeOpenAIServer(script=[text("one"), text("two")]) as server:

        async def sample(i: int) -> list[str]:
            async with _client(server, f"r{i}", f"s{i % 3}") as client:
                out = []
                for _ in range(2):
                    r = await client.chat.completions.create(model="m", messages=USER)
                    out.append(r.choices[0].message.content or "")
                return out

        results = await asyncio.gather(*(sample(i) for i in range(16)))
        collected = [await server.collect(f"r{i}") for i in range(16)]
    assert all(r == ["one", "two"] for r in results)
    for i, by_sample in enumerate(collected):
        assert list(by_sample) == [f"s{i % 3}"] and len(by_sample[f"s{i % 3}"]) == 2


def test_sync_usage_and_unscoped_route() -> None:
    with FakeOpenAIServer(script=["plain"]) as server:
        r = httpx.post(
            server.base_url + "/chat/completions", json={"model": "m", "messages": USER}
        ).json()
        assert r["choices"][0]["message"]["content"] == "plain"
        assert server.calls[0].rollout_id == "unscoped" and server.calls[0].sample_id == "main"
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.url
