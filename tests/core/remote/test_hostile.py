"""Hostile and careless input to the rollout server (issue 18, items 1-9).

Every rollout that was answered 202 must end in a terminal state that is delivered or
queryable; bad input is answered 4xx before admission; nothing foreign is echoed back.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from osmosis_ai.remote import (
    ClusterClient,
    RolloutAgentLoop,
    RolloutContext,
    RolloutRequest,
    RolloutResult,
    ServerSettings,
)
from osmosis_ai.testing import FakeCluster, tool_call_message
from tests.core.remote._helpers import AUTH, ToolLoop, asgi_server, fast_client, init_body


def add_then_ok(body: dict[str, Any]) -> Any:
    if body["messages"][-1]["role"] == "tool":
        return "ok " + body["messages"][-1]["content"]
    return tool_call_message("add", {"a": 1, "b": 2})


def nested(depth: int, leaf: Any = 1) -> Any:
    out = leaf
    for _ in range(depth):
        out = [out]
    return out


def nested_dict(depth: int) -> Any:
    out: Any = 1
    for _ in range(depth):
        out = {"a": out}
    return out


async def _post_raw(client: httpx.AsyncClient, raw: str) -> httpx.Response:
    return await client.post(
        "/v1/rollout/init", content=raw.encode("utf-8", "surrogatepass"),
        headers={**AUTH, "content-type": "application/json"},
    )


def _raw_body(rid: str, url: str, **fields: str) -> str:
    """An init body with some fields given as raw JSON text (deeper than json.dumps allows)."""
    base = json.dumps(init_body(rid, url))[:-1]
    return base + "".join(f', "{k}": {v}' for k, v in fields.items()) + "}"


@pytest.mark.parametrize("where", ["messages", "metadata", "completion_params"])
@pytest.mark.parametrize("depth", [300, 950, 5000])
async def test_deep_nesting_is_refused_before_admission(where: str, depth: int) -> None:
    async with asgi_server(ToolLoop()) as (app, client):
        inner = "[" * depth + "1" + "]" * depth
        raw = {
            "messages": f'[{{"role": "user", "content": "hi", "x": {inner}}}]',
            "metadata": f'{{"x": {inner}}}',
            "completion_params": f'{{"extra": {inner}}}',
        }[where]
        resp = await _post_raw(client, _raw_body("deep", "http://127.0.0.1:9", **{where: raw}))
        assert resp.status_code in (400, 422), resp.text
        assert "Traceback" not in resp.text and "nest" in resp.text
        assert app.state.registry.pending == 0
        assert (await client.get("/v1/rollout/deep", headers=AUTH)).status_code == 404


async def test_a_thousand_refused_inits_leave_no_slot_taken() -> None:
    settings = ServerSettings(max_pending_rollouts=5, shutdown_grace_seconds=1)
    async with asgi_server(ToolLoop(), settings=settings) as (app, client):
        for i in range(20):
            body = init_body(f"d{i}", "http://127.0.0.1:9", metadata={"x": nested_dict(260)})
            assert (await client.post("/v1/rollout/init", json=body, headers=AUTH)).status_code == 400
        assert app.state.registry.pending == 0


async def test_a_lone_surrogate_or_a_non_ascii_callback_key_is_refused() -> None:
    async with asgi_server(ToolLoop()) as (app, client):
        raw = _raw_body("s", "http://127.0.0.1:9",
                        messages='[{"role": "user", "content": "\\ud800"}]')
        resp = await _post_raw(client, raw)
        assert resp.status_code == 422 and "UTF-8" in resp.text
        key = await client.post("/v1/rollout/init", headers=AUTH,
                                json=init_body("k", "http://127.0.0.1:9", api_key="clé"))
        assert key.status_code == 422 and "api_key" in key.text
        assert app.state.registry.pending == 0


async def test_every_202_ends_in_a_queryable_terminal_state(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from osmosis_ai.remote import TraceWriter

    def broken_write(self: Any, *_a: Any, **_k: Any) -> None:
        raise RuntimeError("trace writer broke")

    async with FakeCluster(add_then_ok) as cluster:
        async with asgi_server(ToolLoop(), log_dir=tmp_path) as (app, client):
            registry = app.state.registry
            monkeypatch.setattr(TraceWriter, "write", broken_write)

            async def exploding_complete(*_a: Any, **_k: Any) -> None:
                raise UnicodeEncodeError("ascii", "é", 0, 1, "not ascii")

            registry.client.complete = exploding_complete
            resp = await client.post("/v1/rollout/init", json=init_body("t", cluster.url),
                                     headers=AUTH)
            assert resp.status_code == 202
            await registry.finished("t")
            view = await client.get("/v1/rollout/t", headers=AUTH)
            assert view.status_code == 200
            assert view.json()["state"] == "delivery_failed"
            assert "UnicodeEncodeError" in view.json()["delivery_error"]
            assert view.json()["result"]["status"] == "COMPLETED"
            assert registry.pending == 0


async def test_foreign_response_bodies_are_not_echoed() -> None:
    secret = "root:x:0:0:SECRET-METADATA"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text=secret)

    async with asgi_server(ToolLoop()) as (app, client):
        registry = app.state.registry
        registry.client = ClusterClient(
            fast_client(), http=httpx.AsyncClient(transport=httpx.MockTransport(handler))
        )
        await client.post("/v1/rollout/init", json=init_body("f", "http://169.254.169.254"),
                          headers=AUTH)
        await registry.finished("f")
        view = (await client.get("/v1/rollout/f", headers=AUTH)).json()
    assert "HTTP 404" in view["result"]["error_message"]
    assert "SECRET" not in json.dumps(view)


async def test_callback_hosts_can_be_restricted_and_the_caller_is_allowed() -> None:
    settings = ServerSettings(allowed_callback_hosts=["10.0.0.5"], shutdown_grace_seconds=1)
    async with FakeCluster(add_then_ok) as cluster:
        async with asgi_server(ToolLoop(), settings=settings) as (app, client):
            bad = await client.post("/v1/rollout/init", headers=AUTH,
                                    json=init_body("x", "http://169.254.169.254"))
            assert bad.status_code == 403
            assert "allowed_callback_hosts" in bad.json()["error"].lower().replace("-", "_") or (
                "ALLOWED_CALLBACK_HOSTS" in bad.json()["error"]
            )
            listed = await client.post("/v1/rollout/init", headers=AUTH,
                                       json=init_body("y", "http://10.0.0.5:1"))
            assert listed.status_code == 202
            # The trainer's own address (the peer of the init request) is allowed by default;
            # the ASGI test client connects from 127.0.0.1, where the fake cluster listens.
            own = await client.post("/v1/rollout/init", json=init_body("z", cluster.url),
                                    headers=AUTH)
            assert own.status_code == 202
            await cluster.wait_for("z")
            # The cluster has the callback; the server counts the rollout done only once the
            # callback's answer is back: wait for that, not for the cluster's side.
            await app.state.registry.finished("z")
            assert app.state.registry.pending <= 1  # "y" may still retry its callback


async def test_finished_records_are_bounded_by_count_and_bytes() -> None:
    async with FakeCluster(lambda _b: "done") as cluster:
        settings = ServerSettings(max_finished_records=2, shutdown_grace_seconds=1)
        async with asgi_server(ToolLoop(), settings=settings) as (app, client):
            registry = app.state.registry
            for rid in ("a", "b", "c"):
                await client.post("/v1/rollout/init", json=init_body(rid, cluster.url),
                                  headers=AUTH)
                await registry.finished(rid)
            assert (await client.get("/v1/rollout/a", headers=AUTH)).status_code == 404
            assert (await client.get("/v1/rollout/c", headers=AUTH)).status_code == 200
        settings = ServerSettings(max_finished_bytes=1_000_000, shutdown_grace_seconds=1)
        async with asgi_server(ToolLoop(), settings=settings) as (app, client):
            registry = app.state.registry
            big = [{"role": "user", "content": "x" * 600_000}]
            for rid in ("p", "q"):
                await client.post("/v1/rollout/init", headers=AUTH,
                                  json={**init_body(rid, cluster.url), "messages": big})
                await registry.finished(rid)
            assert (await client.get("/v1/rollout/p", headers=AUTH)).status_code == 404
            assert (await client.get("/v1/rollout/q", headers=AUTH)).status_code == 200
            assert registry.finished_bytes <= 1_000_000


async def test_conflicting_inits_get_409() -> None:
    gate = asyncio.Event()
    async with FakeCluster(add_then_ok) as cluster:
        async with asgi_server(ToolLoop(gate=gate)) as (app, client):
            post = lambda body: client.post("/v1/rollout/init", json=body, headers=AUTH)  # noqa: E731
            first = await post(init_body("one", cluster.url, idempotency_key="k1"))
            assert first.status_code == 202
            other_id = await post(init_body("two", cluster.url, idempotency_key="k1"))
            assert other_id.status_code == 409 and "k1" in other_id.json()["error"]
            changed = await post({**init_body("one", cluster.url), "max_turns": 3})
            assert changed.status_code == 409
            same = await post(init_body("one", cluster.url, idempotency_key="k1"))
            assert same.status_code == 202
            # Keys and ids are separate: a key equal to another rollout's id is no conflict.
            keyed = await post(init_body("three", cluster.url, idempotency_key="one"))
            assert keyed.status_code == 202 and keyed.json()["rollout_id"] == "three"
            gate.set()
            for rid in ("one", "three"):
                await app.state.registry.finished(rid)
            assert (await post(init_body("two", cluster.url))).status_code == 202
            await app.state.registry.finished("two")


async def test_rollout_ids_with_slashes_can_be_queried() -> None:
    async with FakeCluster(add_then_ok) as cluster:
        async with asgi_server(ToolLoop()) as (app, client):
            await client.post("/v1/rollout/init", json=init_body("step-1/7", cluster.url),
                              headers=AUTH)
            await app.state.registry.finished("step-1/7")
            view = await client.get("/v1/rollout/step-1/7", headers=AUTH)
            assert view.status_code == 200 and view.json()["rollout_id"] == "step-1/7"
            encoded = await client.get("/v1/rollout/step-1%2F7", headers=AUTH)
            assert encoded.status_code == 200


async def test_a_stalled_body_is_answered_408() -> None:
    from osmosis_ai.remote._server import _BodyLimit

    sent: list[dict[str, Any]] = []
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()  # a client that sent its headers and then nothing
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def app(*_a: Any) -> None:
        raise AssertionError("the app must not see a stalled request")

    limit = _BodyLimit(app, max_bytes=1024, read_timeout_s=0.01)
    await limit({"type": "http", "method": "POST", "headers": []}, receive, send)
    assert sent[0]["status"] == 408


async def test_seed_loops_pass_completion_params_as_keywords() -> None:
    class SeedLoop(RolloutAgentLoop):
        name = "seed"

        def get_tools(self, request: RolloutRequest) -> list[dict[str, Any]]:
            return []

        async def run(self, ctx: RolloutContext) -> RolloutResult:
            messages = list(ctx.request.messages)
            result = await ctx.chat(messages, **ctx.request.completion_params)
            return ctx.complete([*messages, result.message])

    async with FakeCluster(lambda _b: "done") as cluster:
        async with asgi_server(SeedLoop()) as (app, client):
            body = init_body("seed", cluster.url,
                             completion_params={"temperature": 0.3, "top_k": 5})
            await client.post("/v1/rollout/init", json=body, headers=AUTH)
            result = await cluster.wait_for("seed")
    assert result["status"] == "COMPLETED", result
    assert cluster.chat_calls[0]["temperature"] == 0.3 and cluster.chat_calls[0]["top_k"] == 5
    params = RolloutRequest(rollout_id="r", server_url="http://h",
                            completion_params={"max_tokens": 9}).completion_params
    assert dict(**params) == {"max_tokens": 9}


async def test_credentials_in_server_url_stay_out_of_traces(tmp_path: Path) -> None:
    async with FakeCluster(add_then_ok) as cluster:
        url = cluster.url.replace("http://", "http://user:hunter2@")
        async with asgi_server(ToolLoop(), log_dir=tmp_path) as (app, client):
            await client.post("/v1/rollout/init", json=init_body("c", url), headers=AUTH)
            await app.state.registry.finished("c")
            folder = app.state.trace_folder
    text = "".join(p.read_text() for p in folder.glob("*.jsonl"))
    assert "init" in text and "hunter2" not in text
