"""The trainer plays the training cluster: RolloutRunner + gateway (ScriptedEngine) driving a remote
rollout server (create_app on 127.0.0.1) through RemoteRolloutWorkflow."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from osmosis_ai.remote import (
    ClientSettings,
    RolloutAgentLoop,
    RolloutContext,
    RolloutRequest,
    RolloutResult,
    ServerSettings,
    create_app,
)
from osmosis_ai.rollout import ErrorCategory, Grader, GraderContext, SampleStatus
from osmosis_ai.rollout.running import RolloutRunner
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import ScriptedEngine, serve_in_loop, text, tool_call
from osmosis_trainer.server_workflow import RemoteCallbacks, remote_entrypoint
from tests.core.remote._helpers import ADD_TOOL, chat_running_add

KEY = "server-key"


class Row:
    def __init__(self, i: int, label: str | None = "5", **metadata: Any) -> None:
        self.row_index = i
        self.prompt = [{"role": "user", "content": f"question {i}: 2+3?"}]
        self.label = label
        self.metadata = metadata


class AddLoop(RolloutAgentLoop):
    """Tool loop; reward 1.0 when the final text equals ground_truth, unless told otherwise."""

    name = "add-loop"

    def __init__(self) -> None:
        self.requests: list[RolloutRequest] = []
        self.release = asyncio.Event()
        """Rows with ``hold`` wait for it (the test decides when they go on, not a clock)."""

    def get_tools(self, request: RolloutRequest) -> list[dict[str, Any]]:
        return [ADD_TOOL]

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        self.requests.append(ctx.request)
        meta = ctx.request.metadata
        if meta.get("fail"):
            return ctx.error("the sandbox is gone")
        if meta.get("hold"):
            await self.release.wait()
        messages = list(ctx.request.messages)
        result = await chat_running_add(ctx, messages)
        if meta.get("no_reward"):
            return ctx.complete(messages)
        return ctx.complete(
            messages, reward=1.0 if result.content == meta.get("ground_truth") else 0.0
        )


def script(req: Any) -> Any:
    last = req.messages[-1]
    return text(last["content"]) if last["role"] == "tool" else tool_call("add", a=2, b=3)


FAST = ClientSettings(
    retry_backoff_seconds=0.01,
    retry_backoff_max_seconds=0.05,
    completion_timeout_seconds=5,
    timeout_seconds=10,
)


@asynccontextmanager
async def cluster(
    loop: RolloutAgentLoop | None = None, *, attach: bool = True, **entry: Any
) -> AsyncIterator[tuple[Any, Any, AddLoop | Any, str]]:
    """(entrypoint, gateway, loop, server url): a remote server and a gateway with callbacks."""
    loop = loop or AddLoop()
    app = create_app(
        loop, api_key=KEY, client_settings=FAST, settings=ServerSettings(shutdown_grace_seconds=1)
    )
    async with (
        serve_in_loop(app) as url,
        PolicyGateway(ScriptedEngine(per_sample=False, script=script), api_key="gw-key") as gw,
    ):
        callbacks = RemoteCallbacks.attach(gw) if attach else RemoteCallbacks(api_key="gw-key")
        entry.setdefault("api_key", KEY)
        yield remote_entrypoint(url, callbacks, **entry), gw, loop, url


async def run_rows(entrypoint: Any, gw: Any, rows: list[Row], **kw: Any) -> list[Any]:
    kw.setdefault("workflow_timeout_s", 30)
    async with RolloutRunner(entrypoint, gw, **kw) as runner:
        outcomes = await runner.run_all(rows)
    return sorted(outcomes, key=lambda o: (o.row_index, o.sample_index))


async def test_remote_rollouts_are_recorded_token_level_with_the_servers_reward() -> None:
    async with cluster() as (entrypoint, gw, loop, _url):
        outcomes = await run_rows(
            entrypoint, gw, [Row(0), Row(1, label="6")], n_samples=2, sampling={"temperature": 0.7}
        )
    assert [o.status for o in outcomes] == ["success"] * 4
    rewards = [o.samples[0].reward for o in outcomes]
    assert rewards == [1.0, 1.0, 0.0, 0.0]  # the fake answers 5; row 1's label is 6
    sample = outcomes[0].samples[0]
    assert sample.id == "main"
    assert [m["role"] for m in sample.messages] == ["user", "assistant", "tool", "assistant"]
    assert len(sample.calls) == 2 and sample.trainable  # the gateway's token-level records
    assert sample.calls[0].tools and sample.calls[0].tools[0]["function"]["name"] == "add"
    assert sample.extra_fields["finish_reason"] == "stop"
    assert sample.metrics["remote/num_llm_calls"] == 2.0
    # each sample is its own rollout on the server, with the label as ground_truth
    assert len({r.rollout_id for r in loop.requests}) == 4
    assert {r.metadata["ground_truth"] for r in loop.requests} == {"5", "6"}
    assert all(r.completion_params.temperature == 0.7 for r in loop.requests)
    assert all(r.api_key == "gw-key" for r in loop.requests)


async def test_missing_reward_without_grader_fails_the_sample() -> None:
    async with cluster() as (entrypoint, gw, _loop, _url):
        [outcome] = await run_rows(entrypoint, gw, [Row(0, no_reward=True)])
    sample = outcome.samples[0]
    assert outcome.status == "failed" and sample.status is SampleStatus.FAILED
    assert sample.reward is None
    assert sample.error is not None and sample.error.category is ErrorCategory.VALIDATION_ERROR
    assert "sent no reward" in sample.error.message


class HalfGrader(Grader[Any]):
    graded: list[str] = []

    async def grade(self, ctx: GraderContext[Any]) -> None:
        for sid in ctx.samples:
            HalfGrader.graded.append(sid)
            ctx.set_sample_reward(sid, 0.5)


async def test_the_grader_scores_only_samples_the_server_left_without_reward() -> None:
    HalfGrader.graded = []
    async with cluster(grader_cls=HalfGrader) as (entrypoint, gw, _loop, _url):
        outcomes = await run_rows(entrypoint, gw, [Row(0), Row(1, no_reward=True)])
    assert [o.samples[0].reward for o in outcomes] == [1.0, 0.5]
    assert HalfGrader.graded == ["main"]  # once: for row 1


async def test_reward_grader_scores_every_sample_and_ignores_the_servers() -> None:
    HalfGrader.graded = []
    async with cluster(grader_cls=HalfGrader, reward="grader") as (entrypoint, gw, _loop, _url):
        outcomes = await run_rows(entrypoint, gw, [Row(0), Row(1, no_reward=True)])
    assert [o.samples[0].reward for o in outcomes] == [0.5, 0.5]
    assert HalfGrader.graded == ["main", "main"]
    # The server's reward is kept beside the grader's, not used.
    assert outcomes[0].samples[0].extra_fields["server_reward"] == 1.0
    assert "server_reward" not in outcomes[1].samples[0].extra_fields


async def test_reward_server_never_asks_the_grader_and_says_how_to_fix_a_missing_one() -> None:
    HalfGrader.graded = []
    async with cluster(grader_cls=HalfGrader, reward="server") as (entrypoint, gw, _loop, _url):
        outcomes = await run_rows(entrypoint, gw, [Row(0), Row(1, no_reward=True)])
    assert outcomes[0].samples[0].reward == 1.0 and HalfGrader.graded == []
    error = outcomes[1].samples[0].error
    assert outcomes[1].status == "failed" and error is not None
    assert '[remote] reward = "grader"' in error.message


async def test_server_error_is_a_failed_rollout_with_its_reason() -> None:
    async with cluster() as (entrypoint, gw, _loop, _url):
        [outcome] = await run_rows(entrypoint, gw, [Row(0, fail=True)])
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.category is ErrorCategory.AGENT_ERROR
    assert (
        "reported ERROR" in outcome.error.message and "the sandbox is gone" in outcome.error.message
    )


async def test_a_lost_callback_is_recovered_from_the_status_route() -> None:
    # The callbacks are not mounted on the gateway: every callback answers 404.
    async with cluster(attach=False, poll_interval_s=0.2) as (entrypoint, gw, _loop, _url):
        [outcome] = await run_rows(entrypoint, gw, [Row(0)])
    assert outcome.status == "success"
    assert outcome.samples[0].reward == 1.0 and len(outcome.samples[0].calls) == 2


async def test_unreachable_server_and_wrong_key_fail_with_http_error() -> None:
    async with cluster(api_key="wrong") as (entrypoint, gw, loop, _url):
        [outcome] = await run_rows(entrypoint, gw, [Row(0)])
    assert outcome.error is not None and outcome.error.category is ErrorCategory.HTTP_ERROR
    assert "HTTP 403" in outcome.error.message
    assert loop.requests == []
    async with PolicyGateway(ScriptedEngine(per_sample=False, script=script)) as gw:
        callbacks = RemoteCallbacks.attach(gw)
        entrypoint = remote_entrypoint("http://127.0.0.1:9", callbacks)
        entrypoint.workflow_config.init_retries = 1
        [outcome] = await run_rows(entrypoint, gw, [Row(0)])
    assert outcome.error is not None and outcome.error.category is ErrorCategory.HTTP_ERROR
    assert "unreachable" in outcome.error.message


async def test_a_rollout_that_outlives_the_workflow_timeout() -> None:
    async with cluster() as (entrypoint, gw, loop, url):
        [outcome] = await run_rows(entrypoint, gw, [Row(0, hold=True)], workflow_timeout_s=0.5)
        assert outcome.error is not None and outcome.error.category is ErrorCategory.TIMEOUT
        # only now the server goes on; its callback finds nobody waiting and is refused (404)
        loop.release.set()
        status = f"{url}/v1/rollout/{loop.requests[0].rollout_id}"
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as http:
            for _ in range(1200):  # a safety net against a hang (120 s), never the test
                view = (await http.get(status)).json()
                if view["state"] in ("delivered", "delivery_failed"):
                    break
                await asyncio.sleep(0.1)
    assert view["state"] == "delivery_failed" and "HTTP 404" in view["delivery_error"]
    assert entrypoint.workflow_config.callbacks.stats["unknown"] == 1


async def test_callback_router_checks_key_body_and_rollout() -> None:
    async with PolicyGateway(ScriptedEngine(per_sample=False, script=script), api_key="gw") as gw:
        callbacks = RemoteCallbacks.attach(gw)
        future = callbacks.expect("r1")
        body = {"rollout_id": "r1", "status": "COMPLETED", "final_messages": [], "reward": 0.25}
        scoped = f"{gw.url}/rollouts/r1/samples/main/v1/rollout/completed"
        async with httpx.AsyncClient() as http:
            assert (await http.post(scoped, json=body)).status_code == 401
            auth = {"Authorization": "Bearer gw"}
            assert (
                await http.post(scoped, json={"rollout_id": "r1"}, headers=auth)
            ).status_code == 422
            other = f"{gw.url}/rollouts/r2/samples/main/v1/rollout/completed"
            assert (await http.post(other, json=body, headers=auth)).status_code == 422
            assert (await http.post(scoped, json=body, headers=auth)).status_code == 200
            assert (
                await http.post(scoped, json=body, headers=auth)
            ).status_code == 200  # duplicate
            unknown = {**body, "rollout_id": "nobody"}
            assert (
                await http.post(f"{gw.url}/v1/rollout/completed", json=unknown, headers=auth)
            ).status_code == 404
        response = await asyncio.wait_for(future, 5)
    assert response.reward == 0.25
    await asyncio.sleep(0)
    assert callbacks.stats == {"received": 2, "duplicates": 1, "unknown": 1, "rejected": 2}


async def test_remote_entrypoint_for_reads_the_training_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from osmosis_trainer.server_workflow import remote_entrypoint_for

    monkeypatch.setenv("OSMOSIS_ROLLOUT_API_KEY", "from-env")
    config = SimpleNamespace(
        remote=SimpleNamespace(server_url="http://h:9000/", api_key=None),
        training=SimpleNamespace(max_prompt_length=100, max_response_length=28),
    )
    async with PolicyGateway(ScriptedEngine(per_sample=False, script=script)) as gw:
        entry = remote_entrypoint_for(config, gw)
    cfg = entry.workflow_config
    assert (cfg.server_url, cfg.api_key, cfg.max_tokens_total) == ("http://h:9000", "from-env", 128)
    assert entry.grader_cls is None and cfg.require_reward


async def test_a_callback_sender_leaving_mid_body_is_not_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    from tests.core.serving._disconnect import leave_mid_body

    caplog.set_level(logging.DEBUG, logger="osmosis")
    async with PolicyGateway(ScriptedEngine(["ok"]), api_key="gw-key") as gw:
        RemoteCallbacks.attach(gw)
        await leave_mid_body(gw.url, "/v1/rollout/completed", b"Authorization: Bearer gw-key\r\n",
                             b'{"rollout_id"', caplog)
    assert any("disconnected" in r.getMessage() for r in caplog.records)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
