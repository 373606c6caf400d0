"""osmosis-ai 0.3's public behaviour of ``LocalBackend``, the contexts, samples and the server,
ported from its own tests (``tests/unit/rollout/test_local_backend.py``, ``test_context.py``,
``test_sample_validation.py``, ``test_server_auth.py``) where they test public behaviour."""

from __future__ import annotations

import asyncio
import math
from typing import Any
from unittest.mock import AsyncMock

import httpx
import pytest
from pydantic import ValidationError

from osmosis_ai.rollout.agent_workflow import AgentWorkflow
from osmosis_ai.rollout.backend.local import LocalBackend
from osmosis_ai.rollout.context import (
    AgentWorkflowContext,
    GraderContext,
    RolloutContext,
    SampleSource,
    get_rollout_context,
)
from osmosis_ai.rollout.grader import Grader
from osmosis_ai.rollout.server import ControllerAuth, create_rollout_server
from osmosis_ai.rollout.types import (
    AgentWorkflowConfig,
    AgentWorkflowOutput,
    ConcurrencyConfig,
    ExecutionRequest,
    GraderConfig,
    RolloutErrorCategory,
    RolloutSample,
    RolloutStatus,
)


class StaticSampleSource(SampleSource):
    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages

    async def get_sample(self) -> RolloutSample:
        return RolloutSample(messages=self.messages)


class StubWorkflow(AgentWorkflow[Any]):
    async def run(self, ctx: AgentWorkflowContext[Any]) -> None:
        ambient = get_rollout_context()
        assert ambient is not None
        ambient.set_sample_source(StaticSampleSource([{"role": "assistant", "content": "done"}]))


class FailingWorkflow(AgentWorkflow[Any]):
    async def run(self, ctx: AgentWorkflowContext[Any]) -> None:
        raise ValueError("workflow error")


class StubGrader(Grader[Any]):
    async def grade(self, ctx: GraderContext[Any]) -> None:
        ctx.set_reward(1.0)


class FailingGrader(Grader[Any]):
    async def grade(self, ctx: GraderContext[Any]) -> None:
        raise RuntimeError("grading failed")


def request(**fields: Any) -> ExecutionRequest:
    return ExecutionRequest(id="r1", prompt=[{"role": "user", "content": "hi"}], **fields)


def backend(workflow: Any = StubWorkflow, **kwargs: Any) -> LocalBackend:
    return LocalBackend(workflow=workflow, workflow_config=AgentWorkflowConfig(name="t"), **kwargs)


# -- LocalBackend ---------------------------------------------------------------------------


def test_health_and_concurrency() -> None:
    health = backend().health()
    assert health["status"] == "ok" and "concurrency" in health
    assert LocalBackend(workflow=StubWorkflow).max_concurrency == 4  # no config: 4, as in 0.3
    limited = AgentWorkflowConfig(name="t", concurrency=ConcurrencyConfig(max_concurrent=2))
    assert LocalBackend(workflow=StubWorkflow, workflow_config=limited).max_concurrency == 2


def test_string_references_resolve() -> None:
    here = __name__
    b = LocalBackend(workflow=f"{here}:StubWorkflow", grader=f"{here}:StubGrader")
    assert b.workflow_cls is StubWorkflow and b.grader_cls is StubGrader
    with pytest.raises(ValueError, match="module:attribute"):
        LocalBackend(workflow="no_colon_here")
    with pytest.raises(TypeError, match="AgentWorkflow subclass"):
        LocalBackend(workflow=StubGrader)  # type: ignore[arg-type]


async def test_execute_success_calls_the_callback() -> None:
    on_complete = AsyncMock()
    await backend().execute(request(), on_workflow_complete=on_complete)
    on_complete.assert_awaited_once()
    result = on_complete.call_args[0][0]
    assert result.status == RolloutStatus.SUCCESS
    assert result.sample.messages == [{"role": "assistant", "content": "done"}]


async def test_returned_output_is_the_sample_over_the_ambient_source() -> None:
    class Returning(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> AgentWorkflowOutput:
            ambient = get_rollout_context()
            assert ambient is not None
            ambient.set_sample_source(StaticSampleSource([{"role": "assistant", "content": "x"}]))
            return AgentWorkflowOutput(
                messages=[{"role": "assistant", "content": "returned"}], metrics={"quality": 0.75}
            )

    result = await backend(Returning).run_workflow(request(label="expected"))
    assert result.status == RolloutStatus.SUCCESS and result.sample is not None
    assert result.sample.messages == [{"role": "assistant", "content": "returned"}]
    assert result.sample.label == "expected" and result.sample.metrics == {"quality": 0.75}


async def test_bare_messages_are_accepted() -> None:
    class Returning(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> list[dict[str, Any]]:
            return [{"role": "assistant", "content": "returned"}]

    result = await backend(Returning).run_workflow(request())
    assert result.sample is not None
    assert result.sample.messages == [{"role": "assistant", "content": "returned"}]


async def test_metrics_made_non_finite_in_place_fail_validation() -> None:
    class Returning(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> AgentWorkflowOutput:
            output = AgentWorkflowOutput(metrics={"score": 1.0})
            output.metrics["score"] = math.nan
            return output

    result = await backend(Returning).run_workflow(request())
    assert result.status == RolloutStatus.FAILURE
    assert result.err_category == RolloutErrorCategory.VALIDATION_ERROR
    assert result.err_message is not None and "finite" in result.err_message


async def test_workflow_failure_reaches_the_callback_with_its_category() -> None:
    on_complete = AsyncMock()
    await backend(FailingWorkflow).execute(request(), on_workflow_complete=on_complete)
    result = on_complete.call_args[0][0]
    assert result.status == RolloutStatus.FAILURE
    assert "workflow error" in result.err_message
    assert result.err_category == RolloutErrorCategory.VALIDATION_ERROR


async def test_grader_sees_the_sample_and_the_metadata() -> None:
    captured: dict[str, Any] = {}

    class Returning(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> AgentWorkflowOutput:
            captured["workflow_metadata"] = ctx.metadata
            return AgentWorkflowOutput(
                messages=[{"role": "assistant", "content": "returned"}],
                metrics={"quality": 0.75},
                info={"workflow_only": True},
            )

    class Capturing(Grader[Any]):
        async def grade(self, ctx: GraderContext[Any]) -> None:
            assert ctx.sample is not None
            captured["messages"] = ctx.sample.messages
            captured["metrics"] = ctx.sample.metrics
            captured["grader_metadata"] = ctx.metadata
            ctx.set_reward(1.0)

    b = backend(Returning, grader=Capturing, grader_config=GraderConfig(name="g"))
    on_complete, on_grader = AsyncMock(), AsyncMock()
    await b.execute(request(label="l", metadata={"input_only": True}), on_complete, on_grader)
    graded = on_grader.call_args[0][0]
    assert graded.status == RolloutStatus.SUCCESS and graded.sample.reward == 1.0
    assert captured == {
        "workflow_metadata": {"input_only": True},
        "messages": [{"role": "assistant", "content": "returned"}],
        "metrics": {"quality": 0.75},
        "grader_metadata": {"input_only": True},
    }


async def test_grader_failure_is_a_failure_result() -> None:
    on_grader = AsyncMock()
    await backend(grader=FailingGrader).execute(request(label="x"), AsyncMock(), on_grader)
    graded = on_grader.call_args[0][0]
    assert graded.status == RolloutStatus.FAILURE and "grading failed" in graded.err_message


async def test_a_grader_that_sets_no_reward_fails() -> None:
    class Silent(Grader[Any]):
        async def grade(self, ctx: GraderContext[Any]) -> None:
            return None

    on_grader = AsyncMock()
    await backend(grader=Silent).execute(request(label="x"), AsyncMock(), on_grader)
    assert on_grader.call_args[0][0].status == RolloutStatus.FAILURE


async def test_workflow_deadline_is_a_timeout() -> None:
    class Slow(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> None:
            await asyncio.sleep(10)

    result = await backend(Slow).run_workflow(request(agent_timeout_sec=0.05))
    assert result.status == RolloutStatus.FAILURE
    assert result.err_category == RolloutErrorCategory.TIMEOUT


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_timeouts_are_rejected(value: float) -> None:
    with pytest.raises(ValidationError):
        request(agent_timeout_sec=value)


def test_rollout_ids_are_one_path_segment() -> None:
    with pytest.raises(ValidationError, match="one path segment"):
        ExecutionRequest(id="../x", prompt=[])


# -- contexts and samples -------------------------------------------------------------------


def test_rollout_context_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OSMOSIS_CHAT_COMPLETIONS_URL", "OSMOSIS_API_KEY", "OSMOSIS_ROLLOUT_ID"):
        monkeypatch.delenv(name, raising=False)
    empty = RolloutContext()
    assert (empty.chat_completions_url, empty.api_key, empty.rollout_id) == ("", None, "")
    monkeypatch.setenv("OSMOSIS_CHAT_COMPLETIONS_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("OSMOSIS_API_KEY", "k")
    monkeypatch.setenv("OSMOSIS_ROLLOUT_ID", "r9")
    ctx = RolloutContext()
    assert (ctx.chat_completions_url, ctx.api_key, ctx.rollout_id) == (
        "http://127.0.0.1:1/v1", "k", "r9"
    )
    assert RolloutContext(chat_completions_url="http://x/v1").chat_completions_url == "http://x/v1"


def test_rollout_context_as_a_context_manager_nests() -> None:
    assert get_rollout_context() is None
    with RolloutContext(rollout_id="outer") as outer:
        assert get_rollout_context() is outer
        with RolloutContext(rollout_id="inner") as inner:
            assert get_rollout_context() is inner
        assert get_rollout_context() is outer
    assert get_rollout_context() is None


async def test_one_sample_source_per_context() -> None:
    ctx = RolloutContext()
    assert await ctx.get_sample() is None
    ctx.set_sample_source(StaticSampleSource([{"role": "assistant", "content": "a"}]))
    sample = await ctx.get_sample()
    assert sample is not None and sample.messages[0]["content"] == "a"
    with pytest.raises(ValueError, match="already has a sample source"):
        ctx.set_sample_source(StaticSampleSource([]))


def test_grader_context_single_sample() -> None:
    sample = RolloutSample(messages=[{"role": "assistant", "content": "4"}])
    ctx: GraderContext[Any] = GraderContext(label="4", sample=sample)
    assert ctx.sample is sample and ctx.metadata == {}
    ctx.set_reward(1.0)
    assert sample.reward == 1.0 and ctx.get_samples() == {"main": sample}
    with pytest.raises(ValueError, match="no sample"):
        GraderContext(label="4").set_reward(1.0)
    two: GraderContext[Any] = GraderContext(
        samples={"a": RolloutSample(id="a"), "b": RolloutSample(id="b")}
    )
    with pytest.raises(ValueError, match="set_sample_reward"):
        two.set_reward(1.0)
    with pytest.raises(ValueError, match=r"ctx\.samples"):
        _ = two.sample


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_rewards_must_be_finite(value: float) -> None:
    with pytest.raises(ValidationError):
        RolloutSample(messages=[], reward=value)
    with pytest.raises(ValueError, match="finite"):
        GraderContext(sample=RolloutSample(messages=[])).set_reward(value)


def test_workflow_context_as_0_3_builds_it() -> None:
    ctx: AgentWorkflowContext[Any] = AgentWorkflowContext(
        prompt=[{"role": "user", "content": "hi"}], config=AgentWorkflowConfig(name="c")
    )
    assert ctx.metadata == {} and ctx.config is not None and ctx.artifacts_dir is None


# -- server ---------------------------------------------------------------------------------


def test_controller_auth() -> None:
    assert repr(ControllerAuth(api_key="secret")) == "ControllerAuth(api_key=<redacted>)"
    assert repr(ControllerAuth()) == "ControllerAuth(api_key=None)"
    assert ControllerAuth(api_key="k").as_bearer_headers() == {"Authorization": "Bearer k"}
    assert ControllerAuth().as_bearer_headers() is None


async def test_server_runs_a_rollout_and_reports_its_status() -> None:
    app = create_rollout_server(
        backend=backend(grader=StubGrader), configure_logging=False
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
        assert (await client.get("/health")).json()["status"] == "ok"
        response = await client.post("/rollout", json={
            "rollout_id": "r1",
            "initial_messages": [{"role": "user", "content": "hi"}],
            "label": "x",
            "chat_completions_url": "http://127.0.0.1:9/v1",
            "completion_callback_url": "http://127.0.0.1:9/done",
            "grader_callback_url": "http://127.0.0.1:9/graded",
        })
        assert response.status_code == 202
        status: dict[str, Any] = {}
        for _ in range(200):
            status = (await client.get("/rollout/r1/status")).json()
            if status["status"] in ("success", "failure"):
                break
            await asyncio.sleep(0.01)
        assert status == {"rollout_id": "r1", "status": "success", "reward": 1.0}
        unknown = (await client.get("/rollout/nope/status")).json()
        assert unknown["status"] == "unknown"
        bad = await client.post("/rollout/cancel", json={"ids": ["a"], "all": True})
        assert bad.status_code == 422
