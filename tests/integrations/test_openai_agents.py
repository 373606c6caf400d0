"""OsmosisAgent end to end against FakeOpenAIServer, through the real RolloutRunner."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from agents import (
    Agent,
    ModelSettings,
    RunConfig,
    Runner,
    TracingProcessor,
    function_tool,
    set_trace_processors,
)
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.tracing import get_trace_provider
from agents.tracing.processors import default_processor
from openai import AsyncOpenAI
from pydantic import BaseModel

import osmosis_integrations._openai_agents as oa
from osmosis_ai.errors import NotInRolloutError
from osmosis_ai.rollout import SampleStatus
from osmosis_ai.testing import FakeOpenAIServer, FakeRequest, ScriptItem, text, tool_call
from osmosis_integrations import OsmosisAgent, OsmosisRolloutModel, osmosis_run_config
from tests.integrations._calc import calculator, parallel_calculator, question, rows
from tests.integrations._helpers import in_rollout, run_rollouts, samples_of, tool_call_ids


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.mark.parametrize("mode", ["run", "streamed", "sync"])
async def test_calculator_rollouts_record_trainable_samples(mode: str) -> None:
    async with FakeOpenAIServer(script=calculator) as server:
        outcomes, _ = await run_rollouts("agents_calc.py", server, rows(3, mode=mode), n_samples=2)
    assert len(outcomes) == 6
    for outcome in outcomes:
        sample = outcome.sample("calculator")
        assert sample is not None and sample.reward == 1.0, sample
        assert [m["role"] for m in sample.messages] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        assert len(sample.calls) == 2 and all(c.trainable for c in sample.calls)
        assert {c.rollout_id for c in sample.calls} == {outcome.rollout_id}
        assert tool_call_ids(sample.messages) == [t.id for t in sample.calls[0].tool_calls]
        assert list(sample.extra_fields["tool_calls"]) == [sample.calls[0].tool_calls[0].id]
    sent = server.requests
    assert all(r.body["model"] == "osmosis-policy" and r.body["temperature"] == 0.7 for r in sent)
    assert all(bool(r.body.get("stream")) == (mode == "streamed") for r in sent)
    assert not any("reasoning_effort" in r.body or "verbosity" in r.body for r in sent)


async def test_one_module_level_agent_serves_sixteen_concurrent_rollouts() -> None:
    async with FakeOpenAIServer(script=calculator, latency_s=0.01) as server:
        outcomes, runner = await run_rollouts(
            "agents_calc.py", server, rows(8), n_samples=2, concurrency=16
        )
    assert len(outcomes) == 16 and runner.peak_in_flight > 8
    for outcome in outcomes:
        q, answer = question(outcome.row_index)
        [sample] = outcome.samples
        assert sample.reward == 1.0 and sample.extra_fields["final_answer"] == answer
        assert {(c.rollout_id, c.sample_id) for c in sample.calls} == {
            (outcome.rollout_id, "calculator")
        }
        for call in sample.calls:
            users = [m for m in call.request_messages if m["role"] == "user"]
            assert json.dumps(users).count("What is") == 1 and q in json.dumps(users)


async def test_parallel_tool_calls_are_kept_by_call_id() -> None:
    agent = OsmosisAgent(
        name="calc", tools=[add], model_settings=ModelSettings(parallel_tool_calls=True)
    )
    async with FakeOpenAIServer(script=parallel_calculator) as server:
        with in_rollout(server) as scope:
            result = await Runner.run(agent, question(0)[0])
        samples = await samples_of(scope)
    sample = samples["calc"]
    assert result.final_output == "13"
    assert len(sample.calls[0].tool_calls) == 2
    assert list(sample.extra_fields["tool_calls"]) == [t.id for t in sample.calls[0].tool_calls]
    assert server.requests[0].body["parallel_tool_calls"] is True


async def test_a_429_is_retried_by_the_runner_not_recorded_as_failure() -> None:
    agent = OsmosisAgent(name="calc", tools=[add])
    async with FakeOpenAIServer(script=calculator) as server:
        server.fail_next(3, retry_after=0.0)
        with in_rollout(server) as scope:
            result = await Runner.run(agent, question(0)[0])
        samples = await samples_of(scope)
    assert result.final_output == question(0)[1]
    assert len(samples["calc"].calls) == 2 and len(server.requests) == 5


async def test_handoffs_between_osmosis_agents_are_two_samples() -> None:
    math = OsmosisAgent(name="math", instructions="Do the math.", tools=[add])
    triage = OsmosisAgent(name="triage", instructions="Route.", handoffs=[math])

    def script(req: FakeRequest) -> ScriptItem:
        if req.sample_id == "triage":
            return tool_call("transfer_to_math")
        return calculator(req)

    async with FakeOpenAIServer(script=script) as server:
        with in_rollout(server) as scope:
            result = await Runner.run(triage, question(3)[0])
        samples = await samples_of(scope)
    assert result.final_output == question(3)[1] and result.last_agent is math
    assert {k: len(s.calls) for k, s in samples.items()} == {"triage": 1, "math": 2}
    assert samples["math"].messages[0] == {"role": "system", "content": "Do the math."}
    handoff_tools = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert handoff_tools == ["transfer_to_math"]


async def test_plain_agents_reach_the_policy_with_osmosis_run_config(
    caplog: pytest.LogCaptureFixture,
) -> None:
    helper = Agent(name="helper", instructions="Help.", tools=[add])  # a plain SDK agent
    with caplog.at_level(logging.WARNING, logger="osmosis"):
        triage = OsmosisAgent(name="triage", handoffs=[helper])
    assert "plain agent 'helper'" in caplog.text

    def script(req: FakeRequest) -> ScriptItem:
        return tool_call("transfer_to_helper") if req.sample_id == "triage" else calculator(req)

    async with FakeOpenAIServer(script=script) as server:
        with in_rollout(server) as scope:
            result = await Runner.run(triage, question(3)[0], run_config=osmosis_run_config())
        samples = await samples_of(scope)
    assert result.final_output == question(3)[1]
    assert {k: len(s.calls) for k, s in samples.items()} == {"triage": 1, "main": 2}
    assert not any("reasoning_effort" in r.body or "verbosity" in r.body for r in server.requests)


class Answer(BaseModel):
    value: int


async def test_structured_output_type() -> None:
    agent = OsmosisAgent(name="typed", output_type=Answer)

    def script(req: FakeRequest) -> ScriptItem:
        assert req.body["response_format"]["type"] == "json_schema"
        return text('{"value": 7}')

    async with FakeOpenAIServer(script=script) as server:
        with in_rollout(server) as scope:
            result = await Runner.run(agent, "seven?")
        samples = await samples_of(scope)
    assert result.final_output == Answer(value=7)
    assert json.loads(samples["typed"].extra_fields["final_answer"]) == {"value": 7}


async def test_placeholder_params_are_defaults_under_model_settings() -> None:
    agent = OsmosisAgent(
        name="p",
        model=OsmosisRolloutModel(temperature=0.2, max_tokens=64, seed=3),
        model_settings=ModelSettings(temperature=0.9),
    )
    async with FakeOpenAIServer(script=["ok"]) as server:
        with in_rollout(server):
            await Runner.run(agent, "hi")
    body = server.requests[0].body
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.9, 64, 3)


async def test_each_call_uses_the_settings_of_its_run_when_they_change() -> None:
    # The model reuses its last resolved settings while the runner passes equal ones: changed
    # settings (extra_args included, merged into a new dict by the SDK) must never be stale.
    agent = OsmosisAgent(name="p", model=OsmosisRolloutModel(temperature=0.2, seed=1))
    runs = [
        ModelSettings(),
        ModelSettings(temperature=0.5, extra_args={"seed": 2}),
        ModelSettings(temperature=0.5, extra_args={"seed": 3}),
        ModelSettings(),
    ]
    async with FakeOpenAIServer(script=["a", "b", "c", "d"]) as server:
        with in_rollout(server):
            for settings in runs:
                await Runner.run(agent, "hi", run_config=RunConfig(model_settings=settings))
    sent = [(r.body["temperature"], r.body["seed"]) for r in server.requests]
    assert sent == [(0.2, 1), (0.5, 2), (0.5, 3), (0.2, 1)]


async def test_clones_and_idle_agents_get_their_own_samples() -> None:
    async with FakeOpenAIServer(script=["a", "b"]) as server:
        with in_rollout(server) as scope:
            agent = OsmosisAgent(name="calc")
            twin = agent.clone(instructions="Other.")
            OsmosisAgent(name="idle")
            await Runner.run(agent, "hi")
            await Runner.run(twin, "hi")
        samples = await samples_of(scope)
    assert {k: len(s.calls) for k, s in samples.items()} == {"calc": 1, "calc-2": 1, "idle": 0}
    assert samples["idle"].status is SampleStatus.SKIPPED


async def test_outside_a_rollout_the_error_says_how_to_run_it() -> None:
    agent = OsmosisAgent(name="calc")
    with pytest.raises(NotInRolloutError, match="osmosis eval run"):
        await Runner.run(agent, "hi")


def test_a_model_name_or_real_model_is_rejected() -> None:
    with pytest.raises(TypeError, match=r"OsmosisRolloutModel\(\.\.\.\)"):
        OsmosisAgent(name="x", model="gpt-4o")
    real = OpenAIChatCompletionsModel("gpt-4o", openai_client=AsyncOpenAI(api_key="sk-x"))
    with pytest.raises(TypeError, match="OpenAIChatCompletionsModel"):
        OsmosisAgent(name="x", model=real)


class _Mine(TracingProcessor):
    def on_trace_start(self, trace: Any) -> None: ...
    def on_trace_end(self, trace: Any) -> None: ...
    def on_span_start(self, span: Any) -> None: ...
    def on_span_end(self, span: Any) -> None: ...
    def shutdown(self) -> None: ...
    def force_flush(self) -> None: ...


def _processors() -> tuple[Any, ...]:
    return get_trace_provider()._multi_processor._processors  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("opt_in", ["", "1"])
def test_default_trace_upload_is_removed_unless_opted_in(
    monkeypatch: pytest.MonkeyPatch, opt_in: str
) -> None:
    before = list(_processors())
    mine = _Mine()
    set_trace_processors([default_processor(), mine])
    monkeypatch.setattr(oa, "_traces_checked", False)
    monkeypatch.setenv(oa.TRACE_UPLOAD_ENV, opt_in)
    try:
        assert default_processor() in _processors()  # importing the adapter changed nothing
        OsmosisAgent(name="t")
        expected = [default_processor(), mine] if opt_in else [mine]
        assert list(_processors()) == expected
    finally:
        set_trace_processors(before)


async def test_a_session_carries_one_sample_across_turns() -> None:
    from agents import SQLiteSession

    from osmosis_trainer.trajectory import build_sequences

    agent = OsmosisAgent(name="calc", instructions="Use the tools.", tools=[add])
    session = SQLiteSession("conversation")  # in memory
    (q1, a1), (q2, a2) = question(0), question(3)
    async with FakeOpenAIServer(script=calculator) as server:
        with in_rollout(server) as scope:
            first = await Runner.run(agent, q1, session=session)
            second = await Runner.run(agent, q2, session=session)
        samples = await samples_of(scope)
    assert (first.final_output, second.final_output) == (a1, a2)
    # One agent in one rollout: one sample, its calls from both turns in order.
    [sample] = samples.values()
    assert len(sample.calls) == 4 and all(c.trainable for c in sample.calls)
    # The second turn's first request is the session's history plus the new question.
    history = sample.calls[2].request_messages
    assert [m["role"] for m in history] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert q1 in json.dumps(history[1]) and q2 in json.dumps(history[-1])
    assert history[2]["tool_calls"][0]["id"] == sample.calls[0].tool_calls[0].id
    assert [m["role"] for m in sample.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    # Tokens: each prompt extends the previous prompt + completion, so the whole session is
    # one training sequence whose trained tokens are exactly the sampled ones, in order.
    built = build_sequences(sample.calls)
    assert (len(built.sequences), built.merges, built.mismatches) == (1, 3, [])
    [seq] = built.sequences
    trained = [t for t, m in zip(seq.token_ids, seq.loss_mask, strict=True) if m]
    assert trained == [t for c in sample.calls for t in (c.completion_token_ids or [])]
