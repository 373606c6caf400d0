from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from osmosis_ai.config import SamplingConfig
from osmosis_ai.rollout.scope import PolicyEndpoint
from osmosis_ai.serving import EngineError
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import FakeReply, FakeRequest, ScriptedEngine, tool_call
from tests.trainer.gateway._gated import GatedEngine, watch_admissions

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


def _echo(req: FakeRequest) -> str:
    return "echo: " + str(req.messages[-1]["content"])


def _body(content: str = "hi", **kw: Any) -> dict[str, Any]:
    return {"model": "osmosis-policy", "messages": [{"role": "user", "content": content}], **kw}


async def test_records_per_sample_and_collect_pops() -> None:
    engine = ScriptedEngine(per_sample=False, script=_echo)
    async with PolicyGateway(engine) as gw:
        assert isinstance(gw, PolicyEndpoint)

        async def client(rid: str, sid: str, n: int) -> None:
            route = gw.route(rid, sid)
            async with httpx.AsyncClient() as c:
                for i in range(n):
                    r = await c.post(
                        f"{route.base_url}/chat/completions", json=_body(f"{rid}/{sid}/{i}")
                    )
                    assert r.status_code == 200, r.text

        jobs = [client(f"r{r}", s, 3) for r in range(6) for s in ("main", "judge")]
        await asyncio.gather(*jobs)
        for r in range(6):
            calls = await gw.collect(f"r{r}")
            assert sorted(calls) == ["judge", "main"]
            for sid, recs in calls.items():
                assert [c.request_messages[-1]["content"] for c in recs] == [
                    f"r{r}/{sid}/{i}" for i in range(3)
                ]
                for c in recs:
                    assert c.rollout_id == f"r{r}" and c.sample_id == sid and c.trainable
                    assert (
                        c.response_message["content"]
                        == f"echo: r{r}/{sid}/{c.request_messages[-1]['content'][-1]}"
                    )
                    assert c.policy_version == 0 and c.latency_ms > 0
            assert await gw.collect(f"r{r}") == {}


async def test_reply_shape_logprobs_token_ids_and_model_name() -> None:
    engine = ScriptedEngine(per_sample=False, script=[tool_call("add", a=1, b=2), "five"])
    async with PolicyGateway(engine, policy_name="pol") as gw:
        async with httpx.AsyncClient(base_url=gw.route("r", "main").base_url) as c:
            r = await c.post(
                "/chat/completions", json=_body(tools=TOOLS, logprobs=True, return_token_ids=True)
            )
            data = r.json()
            assert data["model"] == "pol@v0" and data["object"] == "chat.completion"
            choice = data["choices"][0]
            assert choice["finish_reason"] == "tool_calls"
            tc = choice["message"]["tool_calls"][0]
            assert tc["type"] == "function" and json.loads(tc["function"]["arguments"]) == {
                "a": 1,
                "b": 2,
            }
            assert choice["message"]["content"] is None
            assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])
            assert data["usage"]["completion_tokens"] == len(choice["token_ids"])
            assert data["prompt_token_ids"]
            r2 = await c.post("/chat/completions", json=_body())
            d2 = r2.json()
            assert d2["choices"][0]["message"] == {"role": "assistant", "content": "five"}
            assert "token_ids" not in d2["choices"][0] and d2["choices"][0]["logprobs"] is None
            models = (await c.get("/models")).json()
            assert [m["id"] for m in models["data"]] == ["pol@v0", "pol"]
        calls = (await gw.collect("r"))["main"]
        assert [c.finish_reason for c in calls] == ["tool_calls", "stop"]
        assert calls[0].tool_calls[0].name == "add" and calls[0].tools == TOOLS


async def test_streaming_sse_chunks() -> None:
    engine = ScriptedEngine(per_sample=False, script=[FakeReply("thinking", (("add", {"a": 1}), ("add", {"a": 2})))])
    async with PolicyGateway(engine) as gw:
        url = gw.route("r", "s").base_url + "/chat/completions"
        async with httpx.AsyncClient() as c:
            body = _body(tools=TOOLS, stream=True, stream_options={"include_usage": True})
            r = await c.post(url, json=body)
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        content = "".join(
            ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"]
        )
        assert content == "thinking"
        tcs = [
            tc
            for ch in chunks
            if ch["choices"]
            for tc in ch["choices"][0]["delta"].get("tool_calls", [])
        ]
        assert [tc["index"] for tc in tcs] == [0, 1]
        assert [ch["choices"][0]["finish_reason"] for ch in chunks if ch["choices"]][
            -1
        ] == "tool_calls"
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
        assert len((await gw.collect("r"))["s"]) == 1


async def test_sampling_is_enforced() -> None:
    engine = ScriptedEngine(per_sample=False, script=_echo, cycle=True)
    sampling = SamplingConfig(rollout_temperature=0.6, rollout_top_p=0.8, max_tokens=16)
    async with PolicyGateway(engine, sampling=sampling) as gw, httpx.AsyncClient() as c:
        url = gw.url + "/v1/chat/completions"
        await c.post(url, json=_body(temperature=0.0, top_p=0.1, max_tokens=4000))
        await c.post(url, json=_body(max_completion_tokens=5))
        await c.post(url, json=_body())
    reqs = [r.generation for r in engine.requests]
    assert [(r.temperature, r.top_p, r.max_tokens) for r in reqs] == [
        (0.6, 0.8, 16),
        (0.6, 0.8, 5),
        (0.6, 0.8, 16),
    ]


async def test_passthrough_without_enforcement() -> None:
    engine = ScriptedEngine(per_sample=False, script=_echo, cycle=True)
    async with PolicyGateway(engine) as gw, httpx.AsyncClient() as c:
        await c.post(
            gw.url + "/v1/chat/completions",
            json=_body(temperature=0.3, top_p=0.5, max_tokens=7, stop="x", seed=3),
        )
    r = engine.requests[0].generation
    assert r is not None and (r.temperature, r.top_p, r.max_tokens, r.stop, r.seed) == (0.3, 0.5, 7, ["x"], 3)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (json.dumps({"model": "m"}).encode(), "messages"),
        (json.dumps({"messages": []}).encode(), "messages"),
        (json.dumps(_body(temperature="hot")).encode(), "temperature"),
        (
            json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(),
            "messages.0.role",
        ),
        (json.dumps(_body(n=2)).encode(), "n"),
        (json.dumps(_body(max_tokens=0)).encode(), "max_tokens"),
    ],
)
async def test_bad_requests_get_openai_style_400(body: bytes, param: str | None) -> None:
    engine = ScriptedEngine(per_sample=False, script=_echo, cycle=True)
    async with PolicyGateway(engine) as gw, httpx.AsyncClient() as c:
        r = await c.post(
            gw.url + "/v1/chat/completions",
            content=body,
            headers={"content-type": "application/json"},
        )
    assert r.status_code == 400
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert engine.requests == []


async def test_unknown_route_method_and_auth() -> None:
    engine = ScriptedEngine(per_sample=False, script=_echo, cycle=True)
    async with PolicyGateway(engine, api_key="sekret") as gw, httpx.AsyncClient() as c:
        r = await c.get(gw.url + "/v2/whatever")
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
        r = await c.get(gw.url + "/v1/chat/completions")
        assert r.status_code == 405 and "error" in r.json()
        r = await c.post(gw.url + "/v1/chat/completions", json=_body())
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        route = gw.route("r", "main")
        assert route.api_key == "sekret"
        r = await c.post(
            route.base_url + "/chat/completions",
            json=_body(),
            headers={"Authorization": "Bearer sekret"},
        )
        assert r.status_code == 200


async def test_engine_failures_become_502_503_or_400_never_500() -> None:
    script = [
        RuntimeError("boom"),
        EngineError("engine down", status_code=503, code="engine_unavailable"),
        EngineError("prompt too long", status_code=400, code="context_length_exceeded"),
        "fine",
    ]
    engine = ScriptedEngine(per_sample=False, script=script)
    async with PolicyGateway(engine) as gw, httpx.AsyncClient() as c:
        url = gw.url + "/v1/chat/completions"
        statuses = []
        for _ in range(4):
            r = await c.post(url, json=_body())
            statuses.append(r.status_code)
            if r.status_code != 200:
                assert set(r.json()["error"]) == {"message", "type", "param", "code"}
        assert statuses == [502, 503, 400, 200]
        assert gw.stats["engine_errors"] == 3
        calls = await gw.collect("unscoped")
        assert len(calls["main"]) == 1


async def test_unscoped_calls_use_headers_or_the_unscoped_rollout() -> None:
    engine = ScriptedEngine(per_sample=False, script=_echo, cycle=True)
    async with PolicyGateway(engine) as gw, httpx.AsyncClient() as c:
        url = gw.url + "/v1/chat/completions"
        await c.post(url, json=_body("a"))
        await c.post(
            url,
            json=_body("b"),
            headers={"x-osmosis-rollout-id": "r9", "x-osmosis-sample-id": "agent"},
        )
        assert list(await gw.collect("unscoped")) == ["main"]
        assert list(await gw.collect("r9")) == ["agent"]
        # "unscoped" is shared: it keeps recording after a collect.
        await c.post(url, json=_body("c"))
        assert len((await gw.collect("unscoped"))["main"]) == 1


async def test_late_calls_of_a_collected_rollout_are_dropped() -> None:
    engine = GatedEngine(script=_echo, cycle=True)
    async with PolicyGateway(engine) as gw, httpx.AsyncClient() as c:
        url = gw.route("r", "main").base_url + "/chat/completions"
        task = asyncio.create_task(c.post(url, json=_body()))
        await engine.generating.wait()
        assert await gw.collect("r") == {}  # the workflow timed out; its call is in flight
        engine.release_generation.set()
        await task
        assert gw.store.late_dropped == 1 and gw.store.pending() == {}


async def test_swap_holds_new_calls_and_drains_in_flight_ones() -> None:
    def versioned(req: FakeRequest) -> str:
        return f"v{engine.policy_version}"

    engine = GatedEngine(script=versioned)
    async with PolicyGateway(engine) as gw, httpx.AsyncClient() as c:
        admissions = watch_admissions(gw)
        url = gw.route("r", "main").base_url + "/chat/completions"
        before = asyncio.create_task(c.post(url, json=_body()))
        await engine.generating.wait()  # in flight on v0
        swap = asyncio.create_task(gw.swap_adapter("/adapters/step-1", 1))
        during = asyncio.create_task(c.post(url, json=_body()))  # arrives mid-swap: waits
        await admissions["waiting"].wait()
        engine.release_generation.set()
        r_before, r_during = await before, await during
        await swap
        assert r_before.json()["choices"][0]["message"]["content"] == "v0"
        assert r_before.json()["model"] == "osmosis-policy@v0"
        assert r_during.json()["choices"][0]["message"]["content"] == "v1"
        assert r_during.json()["model"] == "osmosis-policy@v1"
        assert engine.adapters == [("/adapters/step-1", 1)]
        assert gw.stats["waited_for_swap"] == 1
        calls = (await gw.collect("r"))["main"]
        assert [c.policy_version for c in calls] == [0, 1]


async def test_calls_get_429_when_the_swap_takes_too_long() -> None:
    engine = GatedEngine(script=_echo, cycle=True)
    engine.release_generation.set()
    engine.release_load.clear()  # the load runs until the test lets it finish
    async with (
        PolicyGateway(engine, swap_wait_s=0.05, retry_after_s=2) as gw,
        httpx.AsyncClient() as c,
    ):
        swap = asyncio.create_task(gw.swap_adapter("/a", 3))
        await engine.loading.wait()
        r = await c.post(gw.url + "/v1/chat/completions", json=_body())
        assert r.status_code == 429 and r.headers["retry-after"] == "2"
        assert r.json()["error"]["code"] == "policy_swapping"
        engine.release_load.set()
        await swap
        r = await c.post(gw.url + "/v1/chat/completions", json=_body())
        assert r.status_code == 200 and r.json()["model"] == "osmosis-policy@v3"


def test_thread_hosted_gateway_for_sync_callers() -> None:
    engine = ScriptedEngine(per_sample=False, script=_echo, cycle=True)
    with PolicyGateway(engine) as gw:
        r = httpx.post(gw.route("r", "main").base_url + "/chat/completions", json=_body("sync"))
        assert r.json()["choices"][0]["message"]["content"] == "echo: sync"
        calls = asyncio.run(gw.collect("r"))  # collect works from any loop/thread
        asyncio.run(gw.swap_adapter("/a", 2))  # dispatched to the gateway's own loop
        assert calls["main"][0].response_message["content"] == "echo: sync"
        assert engine.policy_version == 2


async def test_extra_routers_are_mounted() -> None:
    from fastapi import APIRouter

    router = APIRouter()

    @router.post("/rollouts/{rollout_id}/samples/{sample_id}/v1/rollout/completed")
    async def completed(rollout_id: str, sample_id: str) -> dict[str, str]:
        return {"ok": f"{rollout_id}/{sample_id}"}

    async with PolicyGateway(ScriptedEngine(per_sample=False), extra_routers=[router]) as gw, httpx.AsyncClient() as c:
        r = await c.post(gw.route("r1", "main").base_url + "/rollout/completed", json={})
        assert r.json() == {"ok": "r1/main"}
