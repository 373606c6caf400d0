"""The rollout server (create_app) against a fake training cluster on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.remote import ServerSettings
from osmosis_ai.testing import FakeCluster, tool_call_message
from tests.core.remote._helpers import AUTH, KEY, ToolLoop, asgi_server, init_body, wait_until


def add_then_ok(body: dict[str, Any]) -> Any:
    """First call: add(1, 2); after the tool result: 'ok 3'."""
    if body["messages"][-1]["role"] == "tool":
        return "ok " + body["messages"][-1]["content"]
    return tool_call_message("add", {"a": 1, "b": 2})


async def test_init_runs_the_loop_and_posts_the_result() -> None:
    loop = ToolLoop()
    async with FakeCluster(add_then_ok, api_key="cluster-key") as cluster:
        async with asgi_server(loop) as (_app, client):
            body = init_body("r1", cluster.url, api_key="cluster-key",
                             completion_params={"temperature": 0.5, "max_tokens": 64})
            resp = await client.post("/v1/rollout/init", json=body, headers=AUTH)
            assert resp.status_code == 202
            assert resp.json()["rollout_id"] == "r1"
            assert resp.json()["tools"][0]["function"]["name"] == "add"
            result = await cluster.wait_for("r1", timeout_s=120)
    assert result["status"] == "COMPLETED"
    assert result["finish_reason"] == "stop"
    assert result["reward"] == 1.0
    assert [m["role"] for m in result["final_messages"]] == ["user", "assistant", "tool", "assistant"]
    assert result["final_messages"][-1]["content"] == "ok 3"
    assert result["metrics"]["num_llm_calls"] == 2
    assert result["metrics"]["num_tool_calls"] == 1
    assert result["metrics"]["tool_latency_ms"] == 1.0  # one tool call, recorded as 1 ms
    first = cluster.chat_calls[0]
    assert first["rollout_id"] == "r1"
    assert first["temperature"] == 0.5 and first["max_tokens"] == 64
    assert first["tools"][0]["function"]["name"] == "add"
    # the second call carries the full history: messages are only appended to
    assert cluster.chat_calls[1]["messages"][:2] == [body["messages"][0], result["final_messages"][1]]
    assert loop.runs == {"r1": 1}


async def test_duplicate_inits_get_the_same_answer_and_run_once() -> None:
    loop = ToolLoop(tools_delay_s=0.2)  # duplicates arrive while the first init is in get_tools
    async with FakeCluster(add_then_ok) as cluster:
        async with asgi_server(loop) as (_app, client):
            body = init_body("dup", cluster.url)
            answers = await asyncio.gather(
                *(client.post("/v1/rollout/init", json=body, headers=AUTH) for _ in range(20))
            )
            assert {a.status_code for a in answers} == {202}
            assert len({a.text for a in answers}) == 1
            await cluster.wait_for("dup")
            again = await client.post("/v1/rollout/init", json=body, headers=AUTH)
            assert again.status_code == 202 and again.text == answers[0].text
            await asyncio.sleep(0.1)
    assert loop.runs == {"dup": 1}
    assert loop.tools_calls == 1
    assert len(cluster.callbacks["dup"]) == 1


async def test_idempotency_key_reused_for_another_rollout_is_a_conflict() -> None:
    loop = ToolLoop()
    async with FakeCluster(add_then_ok) as cluster:
        async with asgi_server(loop) as (_app, client):
            a = await client.post("/v1/rollout/init", headers=AUTH,
                                  json=init_body("first", cluster.url, idempotency_key="k1"))
            b = await client.post("/v1/rollout/init", headers=AUTH,
                                  json=init_body("second", cluster.url, idempotency_key="k1"))
            await cluster.wait_for("first")
    assert a.status_code == 202 and b.status_code == 409
    assert "first" in b.json()["error"]
    assert loop.runs == {"first": 1}


async def test_auth_on_every_route() -> None:
    async with asgi_server(ToolLoop()) as (_app, client):
        body = init_body("a", "http://127.0.0.1:9")
        missing = await client.post("/v1/rollout/init", json=body)
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == "Bearer"
        assert "missing API key" in missing.json()["error"]
        wrong = await client.post("/v1/rollout/init", json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 403
        assert (await client.get("/health")).status_code == 401
        assert (await client.get("/v1/rollout/a")).status_code == 401
        assert (await client.get("/openapi.json")).status_code == 401
        assert (await client.get("/nowhere")).status_code == 401
        bare = await client.get("/health", headers={"Authorization": KEY})
        assert bare.status_code == 200
        health = (await client.get("/health", headers=AUTH)).json()
        assert health["status"] == "healthy" and health["agent_loop"] == "tool-loop"


async def test_local_mode_needs_no_key() -> None:
    async with asgi_server(ToolLoop(), auth=False) as (app, client):
        assert app.state.api_key is None
        assert (await client.get("/health")).status_code == 200


async def test_generated_key_when_none_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OSMOSIS_ROLLOUT_API_KEY", raising=False)
    async with asgi_server(ToolLoop(), api_key=None) as (app, client):
        key = app.state.api_key
        assert isinstance(key, str) and len(key) >= 24
        assert (await client.get("/health")).status_code == 401
        assert (await client.get("/health", headers={"Authorization": f"Bearer {key}"})).status_code == 200


async def test_client_errors_get_clear_4xx() -> None:
    settings = ServerSettings(max_body_bytes=4096, shutdown_grace_seconds=1)
    async with asgi_server(ToolLoop(), settings=settings) as (_app, client):
        bad_json = await client.post("/v1/rollout/init", content=b'{"rollout_id": ',
                                     headers={**AUTH, "content-type": "application/json"})
        assert bad_json.status_code == 400
        assert bad_json.json()["error"] == "request body is not valid JSON"
        invalid = await client.post("/v1/rollout/init", headers=AUTH,
                                    json={"rollout_id": "  ", "server_url": "ftp://x", "max_turns": 0})
        assert invalid.status_code == 422
        fields = {tuple(d["loc"]) for d in invalid.json()["detail"]}
        assert {("body", "rollout_id"), ("body", "server_url"), ("body", "max_turns")} <= fields
        not_object = await client.post("/v1/rollout/init", json=[1, 2], headers=AUTH)
        assert not_object.status_code == 422
        big = await client.post("/v1/rollout/init", headers=AUTH,
                                json=init_body("big", "http://127.0.0.1:9", metadata={"x": "y" * 5000}))
        assert big.status_code == 413
        assert "4096" in big.json()["detail"]

        async def chunks() -> Any:  # no Content-Length: counted while streaming
            for _ in range(10):
                yield b" " * 1000

        streamed = await client.post("/v1/rollout/init", content=chunks(), headers=AUTH)
        assert streamed.status_code == 413
        unknown = await client.get("/v1/rollout/none", headers=AUTH)
        assert unknown.status_code == 404


async def test_metadata_over_one_megabyte_is_rejected() -> None:
    async with asgi_server(ToolLoop()) as (_app, client):
        resp = await client.post("/v1/rollout/init", headers=AUTH,
                                 json=init_body("m", "http://127.0.0.1:9", metadata={"x": "y" * 1_100_000}))
    assert resp.status_code == 422
    assert "metadata" in json.dumps(resp.json())


async def test_full_server_answers_429_with_retry_after() -> None:
    gate = asyncio.Event()
    loop = ToolLoop(gate=gate)
    settings = ServerSettings(max_concurrent_rollouts=1, max_pending_rollouts=2,
                              retry_after_seconds=3, shutdown_grace_seconds=1)
    async with FakeCluster(add_then_ok) as cluster:
        async with asgi_server(loop, settings=settings) as (_app, client):
            for rid in ("a", "b"):
                assert (await client.post("/v1/rollout/init", json=init_body(rid, cluster.url),
                                          headers=AUTH)).status_code == 202
            full = await client.post("/v1/rollout/init", json=init_body("c", cluster.url), headers=AUTH)
            assert full.status_code == 429
            assert full.headers["retry-after"] == "3"
            # a duplicate of an admitted rollout is still answered while full
            assert (await client.post("/v1/rollout/init", json=init_body("a", cluster.url),
                                      headers=AUTH)).status_code == 202
            health = (await client.get("/health", headers=AUTH)).json()
            assert health["active_rollouts"] == 1 and health["pending_rollouts"] == 2
            gate.set()
            await cluster.wait_for("a")
            await cluster.wait_for("b")
            await wait_until(lambda: _app.state.registry.pending == 0)
            again = await client.post("/v1/rollout/init", json=init_body("c", cluster.url), headers=AUTH)
            assert again.status_code == 202
            await cluster.wait_for("c")


async def test_get_tools_failure_is_422_and_forgotten() -> None:
    loop = ToolLoop()
    async with FakeCluster(add_then_ok) as cluster:
        async with asgi_server(loop) as (_app, client):
            broken = await client.post("/v1/rollout/init", headers=AUTH,
                                       json=init_body("t", cluster.url, metadata={"break_tools": True}))
            assert broken.status_code == 422
            assert "tools unavailable" in broken.json()["error"]
            fixed = await client.post("/v1/rollout/init", json=init_body("t", cluster.url), headers=AUTH)
            assert fixed.status_code == 202
            await cluster.wait_for("t")
    assert loop.runs == {"t": 1}


async def test_status_route_shows_result_even_when_the_callback_fails() -> None:
    async with FakeCluster(add_then_ok, callback_fault_rate=1.0, hang_fraction=0.0) as cluster:
        async with asgi_server(ToolLoop()) as (app, client):
            await client.post("/v1/rollout/init", json=init_body("s", cluster.url), headers=AUTH)
            await wait_until(lambda: app.state.registry.pending == 0)
            view = (await client.get("/v1/rollout/s", headers=AUTH)).json()
    assert view["state"] == "delivery_failed"
    assert "completion callback" in view["delivery_error"] and "HTTP 500" in view["delivery_error"]
    assert view["result"]["status"] == "COMPLETED"
    assert view["result"]["reward"] == 1.0
    assert cluster.faults["callback_500"] == 3  # 1 + completion_retries=2


async def test_llm_5xx_is_retried_then_reported_as_error() -> None:
    async with FakeCluster(add_then_ok, llm_fault_rate=1.0, hang_fraction=0.0) as cluster:
        async with asgi_server(ToolLoop()) as (_app, client):
            await client.post("/v1/rollout/init", json=init_body("e", cluster.url), headers=AUTH)
            result = await cluster.wait_for("e")
    assert result["status"] == "ERROR"
    assert result["finish_reason"] == "error"
    assert "LLM call failed" in result["error_message"]
    assert len(cluster.chat_calls) == 4  # 1 + max_retries=3


async def test_llm_4xx_is_not_retried() -> None:
    async with FakeCluster(add_then_ok, api_key="right") as cluster:
        async with asgi_server(ToolLoop()) as (app, client):
            await client.post("/v1/rollout/init", headers=AUTH,
                              json=init_body("k", cluster.url, api_key="wrong"))
            await wait_until(lambda: app.state.registry.pending == 0)
            view = (await client.get("/v1/rollout/k", headers=AUTH)).json()
    assert view["result"]["status"] == "ERROR" and "HTTP 401" in view["result"]["error_message"]
    assert view["state"] == "delivery_failed"
    assert cluster.chat_calls == []  # the fake answers 401 before recording
    assert "k" not in cluster.callbacks  # the callback carries the same wrong key


async def test_max_turns_ends_the_rollout_as_truncated() -> None:
    always_tool = lambda _body: tool_call_message("add", {"a": 1, "b": 1})  # noqa: E731
    async with FakeCluster(always_tool) as cluster:
        async with asgi_server(ToolLoop()) as (_app, client):
            await client.post("/v1/rollout/init", json=init_body("mt", cluster.url, max_turns=3),
                              headers=AUTH)
            result = await cluster.wait_for("mt")
    assert result["status"] == "COMPLETED"
    assert result["finish_reason"] == "max_turns"
    assert result["metrics"]["num_llm_calls"] == 3
    assert len(cluster.chat_calls) == 3
    assert [m["role"] for m in result["final_messages"]][-2:] == ["assistant", "tool"]


async def test_max_tokens_total_ends_the_rollout() -> None:
    always_tool = lambda _body: tool_call_message("add", {"a": 1, "b": 1})  # noqa: E731
    async with FakeCluster(always_tool) as cluster:
        async with asgi_server(ToolLoop()) as (_app, client):
            await client.post("/v1/rollout/init", headers=AUTH,
                              json=init_body("tok", cluster.url, max_turns=50, max_tokens_total=20))
            result = await cluster.wait_for("tok")
    assert result["finish_reason"] == "max_tokens"
    assert result["metrics"]["max_context_tokens"] >= 20
    assert result["metrics"]["num_llm_calls"] < 50


async def test_graceful_shutdown_reports_running_and_queued_rollouts() -> None:
    gate = asyncio.Event()  # never set: the loops hang until shutdown
    settings = ServerSettings(max_concurrent_rollouts=1, shutdown_grace_seconds=0.2)
    async with FakeCluster(add_then_ok) as cluster:
        async with asgi_server(ToolLoop(gate=gate), settings=settings) as (app, client):
            for rid in ("run", "queued"):
                await client.post("/v1/rollout/init", json=init_body(rid, cluster.url), headers=AUTH)
            await wait_until(lambda: app.state.registry.running == 1)
            registry = app.state.registry
        # lifespan exit = shutdown
        for rid in ("run", "queued"):
            result = await cluster.wait_for(rid, timeout_s=120)
            assert result["status"] == "ERROR"
            assert result["error_message"] == "server shutting down"
        assert registry.runs_of("queued") == 0
        from osmosis_ai.remote import AdmissionError, RolloutRequest

        with pytest.raises(AdmissionError) as info:
            await registry.admit(RolloutRequest(rollout_id="late", server_url=cluster.url))
        assert info.value.status == 503


async def test_log_dir_writes_one_trace_per_rollout(tmp_path: Path) -> None:
    async with FakeCluster(add_then_ok) as cluster:
        async with asgi_server(ToolLoop(), log_dir=tmp_path) as (app, client):
            for rid in ("x/1", "y"):
                await client.post("/v1/rollout/init", json=init_body(rid, cluster.url), headers=AUTH)
            await wait_until(lambda: app.state.registry.pending == 0)
            folder = app.state.trace_folder
    assert folder.parent == tmp_path
    files = sorted(folder.glob("rollout-*.jsonl"))
    assert len(files) == 2
    events = [json.loads(line)["event"] for line in files[0].read_text().splitlines()]
    assert events == ["init", "llm_request", "llm_response", "tool_call", "llm_request",
                      "llm_response", "result", "callback"]
    init = json.loads(files[0].read_text().splitlines()[0])
    assert "api_key" not in init["request"]


async def test_finished_records_expire_after_the_ttl() -> None:
    loop = ToolLoop()
    async with FakeCluster(add_then_ok) as cluster:
        async with asgi_server(loop, record_ttl_seconds=60) as (app, client):
            await client.post("/v1/rollout/init", json=init_body("ttl", cluster.url), headers=AUTH)
            await cluster.wait_for("ttl")
            registry = app.state.registry
            await wait_until(lambda: registry.pending == 0)
            assert registry.prune() == 0  # still young
            assert (await client.get("/v1/rollout/ttl", headers=AUTH)).status_code == 200
            assert registry.prune(now=time.monotonic() + 61) == 1
            assert (await client.get("/v1/rollout/ttl", headers=AUTH)).status_code == 404
