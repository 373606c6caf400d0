"""OsmosisStrandsAgent end to end against FakeOpenAIServer, through the real RolloutRunner."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from pydantic import BaseModel
from strands import Agent, ModelRetryStrategy, tool
from strands.models.openai import OpenAIModel

from osmosis_ai.errors import AgentReuseError, NotInRolloutError
from osmosis_ai.rollout import SampleStatus
from osmosis_ai.testing import FakeOpenAIServer, FakeRequest, ScriptItem, text, tool_call
from osmosis_integrations import OsmosisRolloutModel, OsmosisStrandsAgent
from tests.integrations._calc import calculator, parallel_calculator, question, rows
from tests.integrations._helpers import in_rollout, run_rollouts, samples_of, tool_call_ids


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


@pytest.mark.parametrize("mode", ["async", "sync", "stream"])
async def test_calculator_rollouts_record_trainable_samples(mode: str) -> None:
    async with FakeOpenAIServer(script=calculator) as server:
        outcomes, _ = await run_rollouts("strands_calc.py", server, rows(3, mode=mode), n_samples=2)
    assert len(outcomes) == 6
    for outcome in outcomes:
        sample = outcome.sample("main")
        assert sample is not None and sample.reward == 1.0, sample
        assert [m["role"] for m in sample.messages] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        assert sample.extra_fields["final_answer"] == outcome.label
        assert len(sample.calls) == 2 and all(c.trainable for c in sample.calls)
        assert {c.rollout_id for c in sample.calls} == {outcome.rollout_id}
        # the sample's tool-call ids are the ids the policy emitted (joined, not re-made)
        assert tool_call_ids(sample.messages) == [t.id for t in sample.calls[0].tool_calls]
        [(call_id, record)] = sample.extra_fields["tool_calls"].items()
        assert call_id == sample.calls[0].tool_calls[0].id and record["status"] == "success"
    sent = server.requests
    assert all(r.body["model"] == "osmosis-policy" and r.body["temperature"] == 0.7 for r in sent)
    assert all(bool(r.body.get("stream")) == (mode == "stream") for r in sent)


async def test_sixteen_concurrent_rollouts_two_agents_each_no_cross_talk() -> None:
    async with FakeOpenAIServer(script=calculator, latency_s=0.01) as server:
        outcomes, runner = await run_rollouts(
            "strands_calc.py", server, rows(8, agents=2), n_samples=2, concurrency=16
        )
    assert len(outcomes) == 16 and runner.peak_in_flight > 8
    assert len({o.rollout_id for o in outcomes}) == 16
    for outcome in outcomes:
        q, answer = question(outcome.row_index)
        assert sorted(s.id for s in outcome.samples) == ["checker", "main"]
        for sample in outcome.samples:
            assert sample.reward == 1.0 and sample.extra_fields["final_answer"] == answer
            assert {(c.rollout_id, c.sample_id) for c in sample.calls} == {
                (outcome.rollout_id, sample.id)
            }
            for call in sample.calls:
                users = [m for m in call.request_messages if m["role"] == "user"]
                assert json.dumps(users).count("What is") == 1 and q in json.dumps(users)


async def test_parallel_tool_calls_are_kept_by_call_id() -> None:
    async with FakeOpenAIServer(script=parallel_calculator) as server:
        outcomes, _ = await run_rollouts("strands_calc.py", server, rows(2))
    for outcome in outcomes:
        sample = outcome.sample()
        assert sample is not None and sample.reward == 1.0
        first = sample.calls[0]
        assert len(first.tool_calls) == 2
        tools = sample.extra_fields["tool_calls"]
        assert list(tools) == [t.id for t in first.tool_calls]
        assert all(t["output"] is not None for t in tools.values())


async def test_a_429_is_retried_by_strands_not_recorded_as_failure() -> None:
    async with FakeOpenAIServer(script=calculator) as server:
        server.fail_next(3, retry_after=0.0)
        with in_rollout(server) as scope:
            agent = OsmosisStrandsAgent(
                tools=[add],
                callback_handler=None,
                retry_strategy=ModelRetryStrategy(max_attempts=5, initial_delay=0, max_delay=0),
            )
            result = await agent.invoke_async(question(0)[0])
        samples = await samples_of(scope)
    assert str(result).strip() == question(0)[1]
    assert samples["main"].status is SampleStatus.SUCCESS
    assert len(samples["main"].calls) == 2  # the 429s are not calls
    assert len(server.requests) == 5


async def test_default_retry_strategy_survives_a_gateway_429() -> None:
    async with FakeOpenAIServer(script=calculator) as server:
        server.fail_next(1)
        outcomes, _ = await run_rollouts("strands_calc.py", server, rows(1))
    assert outcomes[0].reward == 1.0


class Answer(BaseModel):
    value: int


async def test_structured_output_both_paths() -> None:
    def script(req: FakeRequest) -> ScriptItem:
        if req.body.get("response_format"):  # agent.structured_output(): a parse() call
            return text('{"value": 9}')
        return tool_call("Answer", value=7)  # structured_output_model=: a forced tool

    async with FakeOpenAIServer(script=script) as server:
        with in_rollout(server) as scope:
            agent = OsmosisStrandsAgent(callback_handler=None)
            result = await agent.invoke_async("seven?", structured_output_model=Answer)
            legacy = await agent.structured_output_async(Answer, "nine?")
        samples = await samples_of(scope)
    assert result.structured_output == Answer(value=7) and legacy == Answer(value=9)
    sample = samples["main"]
    assert sample.extra_fields["structured_output"] == {"value": 7}
    assert len(sample.calls) == 2  # the bypass path still went to the policy route


async def test_sync_calls_each_on_a_fresh_event_loop() -> None:
    async with FakeOpenAIServer(script=calculator) as server:
        with in_rollout(server) as scope:
            agent = OsmosisStrandsAgent(tools=[add], callback_handler=None)

            def twice() -> list[str]:
                return [str(agent(question(0)[0])).strip(), str(agent(question(3)[0])).strip()]

            answers = await asyncio.to_thread(twice)
        samples = await samples_of(scope)
    assert answers == [question(0)[1], question(3)[1]]
    assert len(samples["main"].calls) == 4
    assert [m["role"] for m in samples["main"].messages].count("user") == 2


async def test_agents_in_one_rollout_get_distinct_sample_ids() -> None:
    async with FakeOpenAIServer(script=["a", "b", "c"]) as server:
        with in_rollout(server) as scope:
            one, two = (
                OsmosisStrandsAgent(callback_handler=None),
                OsmosisStrandsAgent(callback_handler=None),
            )
            named = OsmosisStrandsAgent(name="critic", callback_handler=None)
            idle = OsmosisStrandsAgent(name="idle", callback_handler=None)
            for agent in (one, two, named):
                await agent.invoke_async("hi")
        samples = await samples_of(scope)
    assert (one.sample_id, two.sample_id, named.sample_id) == ("main", "main-2", "critic")
    assert {k: len(s.calls) for k, s in samples.items()} == {
        "main": 1,
        "main-2": 1,
        "critic": 1,
        "idle": 0,
    }
    assert samples["idle"].status is SampleStatus.SKIPPED and samples["idle"].remove_sample
    assert idle.sample_id == "idle"


async def test_outside_a_rollout_the_error_says_how_to_run_it() -> None:
    agent = OsmosisStrandsAgent(callback_handler=None)
    assert agent.sample_id is None
    with pytest.raises(NotInRolloutError, match="osmosis eval run"):
        await agent.invoke_async("hi")
    with pytest.raises(NotInRolloutError):
        OsmosisRolloutModel().route()


async def test_one_agent_in_two_rollouts_is_a_clear_error() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(_request: object) -> str:  # runs on the server's thread: holds the first call
        entered.set()
        release.wait(120)
        return "slow"

    async with FakeOpenAIServer(script=slow) as server:
        agent = OsmosisStrandsAgent(callback_handler=None)  # built outside: binds on first use

        async def use(rollout_id: str) -> str:
            with in_rollout(server, rollout_id):
                return str(await agent.invoke_async("hi"))

        first_task = asyncio.ensure_future(use("r-a"))
        assert await asyncio.to_thread(entered.wait, 120)  # r-a's call is in flight
        try:
            second: BaseException | str = await use("r-b")
        except AgentReuseError as exc:
            second = exc
        finally:
            release.set()
        first = await first_task
    assert str(first).strip() == "slow"
    assert isinstance(second, AgentReuseError)
    assert (
        "'r-a'" in str(second) and "'r-b'" in str(second) and "AgentWorkflow.run()" in str(second)
    )


def test_a_real_model_is_rejected_and_a_bare_placeholder_explains_itself() -> None:
    with pytest.raises(TypeError, match=r"OsmosisRolloutModel\(\.\.\.\)"):
        OsmosisStrandsAgent(model=OpenAIModel(model_id="gpt-4o"))
    with pytest.raises(TypeError, match="OsmosisRolloutModel"):
        OsmosisStrandsAgent(model="us.amazon.nova-pro-v1:0")  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="OsmosisStrandsAgent"):
        Agent(model=OsmosisRolloutModel(), callback_handler=None)  # type: ignore[arg-type]


def test_a_policys_malformed_tool_use_is_logged_at_debug_not_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Strands' ERROR for an unknown tool (a policy mistake, graded) does not reach an INFO
    log; its other errors still do."""
    import logging

    import osmosis_integrations._strands  # noqa: F401  (installs the filter)

    executor = logging.getLogger("strands.tools.executors._executor")
    with caplog.at_level(logging.INFO):
        executor.error("tool_name=<%s>, available_tools=<%s> | tool not found in registry",
                       "mul", ["add"])
        logging.getLogger("strands.tools.tools").warning("tool_name=<+> | invalid tool name pattern")
        executor.error("the executor broke")
    assert [r.getMessage() for r in caplog.records] == ["the executor broke"]
