from __future__ import annotations

import asyncio
import contextlib
import math
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.data import DatasetRow
from osmosis_ai.errors import PolicyCallError
from osmosis_ai.rollout import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    AgentWorkflowOutput,
    ErrorCategory,
    Grader,
    GraderContext,
    RolloutSample,
    SampleStatus,
)
from osmosis_ai.rollout._workflow import ConcurrencyConfig
from osmosis_ai.rollout.running import Entrypoint, RolloutRunner
from osmosis_ai.rollout.scope import current_rollout
from osmosis_ai.testing import RecordingEndpoint


def make_row(i: int, question: str = "q", label: str | None = "A", **metadata: Any) -> DatasetRow:
    return DatasetRow(i, i, [{"role": "user", "content": question}], label, metadata, None, question)


class Echo(AgentWorkflow[Any]):
    """Answers with the upper-cased question; behaviour switches on the question."""

    async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
        q = ctx.prompt[-1]["content"]
        if q == "raise":
            raise RuntimeError("boom")
        if q == "value":
            raise ValueError("bad arg")
        if q == "http":
            raise PolicyCallError("policy answered 500", status_code=500)
        if q == "sleep":
            await asyncio.sleep(30)
        if q == "int":
            return 7
        if q == "none":
            return None
        return [*ctx.prompt, {"role": "assistant", "content": q.upper()}]


class Exact(Grader[Any]):
    async def grade(self, ctx: GraderContext[Any]) -> None:
        for sid, sample in ctx.samples.items():
            ctx.set_sample_reward(sid, float(sample.messages[-1]["content"] == ctx.label))


def runner(endpoint: RecordingEndpoint, workflow: type = Echo, grader: type | None = Exact,
           **kw: Any) -> RolloutRunner:
    return RolloutRunner(Entrypoint(workflow, grader), endpoint, **kw)


async def test_runs_rows_times_samples_and_grades(endpoint: RecordingEndpoint) -> None:
    rows = [make_row(0, "a", "A"), make_row(1, "b", "wrong")]
    outcomes = await runner(endpoint, n_samples=3).run_all(rows)
    assert [(o.row_index, o.sample_index) for o in outcomes] == [
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)
    ]
    assert [o.reward for o in outcomes] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert all(o.status is SampleStatus.SUCCESS and o.error is None for o in outcomes)
    first = outcomes[0]
    main = first.sample("main")
    assert main is not None and main.label == "A" and main.messages[-1]["content"] == "A"
    assert len({o.rollout_id for o in outcomes}) == 6
    assert sorted(endpoint.collected) == sorted(o.rollout_id for o in outcomes)
    assert first.duration_ms >= 0 and first.label == "A"


async def test_context_carries_the_row_and_a_fresh_config(
    endpoint: RecordingEndpoint, tmp_path: Path
) -> None:
    seen: list[Any] = []

    class Probe(AgentWorkflow[Any]):
        instances: set[int] = set()

        async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
            scope = current_rollout()
            Probe.instances.add(id(self))
            seen.append((ctx.rollout_id, ctx.row_index, ctx.sample_index, ctx.n_samples,
                         dict(ctx.metadata), ctx.sampling, ctx.config.max_turns, scope.label,
                         scope.rollout_id == ctx.rollout_id, ctx.artifacts_dir))
            ctx.config.max_turns += 100  # must not leak into the next rollout
            ctx.metadata["mutated"] = True  # nor into the row
            return [{"role": "assistant", "content": "x"}]

    config = AgentWorkflowConfig(name="p", max_turns=3)
    ep = Entrypoint(Probe, None, workflow_config=config)
    row = make_row(5, "q", "L", topic="t")
    r = RolloutRunner(ep, endpoint, n_samples=2, sampling={"temperature": 0.3},
                      artifacts_root=tmp_path / "art")
    await r.run_all([row])
    assert len(seen) == 2 and len(Probe.instances) == 2
    for rid, row_index, _, n, metadata, sampling, turns, label, same, art in seen:
        assert (row_index, n, metadata, sampling, turns, label, same) == (
            5, 2, {"topic": "t"}, {"temperature": 0.3}, 3, "L", True
        )
        assert art is not None and art.is_dir() and art.parts[-2:] == (rid, "artifacts")
    assert sorted(s[2] for s in seen) == [0, 1]
    assert row.metadata == {"topic": "t"} and config.max_turns == 3


@pytest.mark.parametrize(
    ("question", "category", "message"),
    [
        ("raise", ErrorCategory.AGENT_ERROR, "RuntimeError: boom"),
        ("value", ErrorCategory.VALIDATION_ERROR, "ValueError: bad arg"),
        ("http", ErrorCategory.HTTP_ERROR, "PolicyCallError: policy answered 500"),
        ("sleep", ErrorCategory.TIMEOUT, "workflow timed out after 3 s"),
        ("int", ErrorCategory.VALIDATION_ERROR, "TypeError: Echo.run returned a int; return a "
                                                "list of message dicts, an AgentWorkflowOutput, "
                                                "or None"),
        ("none", ErrorCategory.VALIDATION_ERROR, "Echo.run produced no samples: it returned None, "
                                                 "registered no sample source and made no policy "
                                                 "call"),
    ],
)
async def test_workflow_failures_are_recorded_and_do_not_stop_other_rows(
    endpoint: RecordingEndpoint, question: str, category: ErrorCategory, message: str
) -> None:
    rows = [make_row(0, "a", "A"), make_row(1, question), make_row(2, "c", "C")]
    outcomes = await runner(endpoint, workflow_timeout_s=3).run_all(rows)  # the good rows never come near it
    good, bad, also_good = outcomes
    assert good.reward == 1.0 and also_good.reward == 1.0
    assert bad.status is SampleStatus.FAILED and bad.reward is None
    assert bad.error is not None and bad.error.category is category
    assert message in bad.error.message
    assert bad.error.where == "workflow"
    assert all(s.reward is None and s.status is SampleStatus.FAILED for s in bad.samples)


class Recorder(AgentWorkflow[Any]):
    """Records policy calls like an adapter would, through the scope's endpoint."""

    async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
        scope = current_rollout()
        ep = scope.endpoint
        assert isinstance(ep, RecordingEndpoint)
        mode = ctx.prompt[-1]["content"]
        ep.record(ctx.rollout_id, "main", ctx.prompt, "thinking")
        ep.record(ctx.rollout_id, "main", ctx.prompt, "final")
        if mode == "sources":
            class Source:
                def build_sample(self, sample_id: str) -> RolloutSample:
                    return RolloutSample(id=sample_id, messages=[{"role": "user", "content": sample_id}])

            sid = scope.claim_sample_id("critic")
            scope.register_sample_source(sid, Source())
            ep.record(ctx.rollout_id, sid, [{"role": "user", "content": "c"}], "critique")
            ep.record(ctx.rollout_id, "helper", [{"role": "user", "content": "h"}], "help")
            return AgentWorkflowOutput(messages=[{"role": "assistant", "content": "done"}],
                                       metrics={"turns": 2.0})
        if mode == "calls-only":
            return None
        return [{"role": "assistant", "content": "returned"}]


class RewardAll(Grader[Any]):
    async def grade(self, ctx: GraderContext[Any]) -> None:
        for sid in ctx.samples:
            ctx.set_sample_reward(sid, 0.5)


async def test_samples_join_sources_returned_messages_and_calls(endpoint: RecordingEndpoint) -> None:
    (outcome,) = await runner(endpoint, Recorder, RewardAll).run_all([make_row(0, "sources")])
    by_id = {s.id: s for s in outcome.samples}
    assert set(by_id) == {"critic", "main", "helper"}
    main, critic, helper = by_id["main"], by_id["critic"], by_id["helper"]
    assert main.messages == [{"role": "assistant", "content": "done"}]
    assert [c.response_message["content"] for c in main.calls] == ["thinking", "final"]
    assert main.metrics == {"turns": 2.0} and critic.metrics == {}
    assert critic.messages == [{"role": "user", "content": "critic"}]
    assert [c.response_message["content"] for c in critic.calls] == ["critique"]
    # a sample id with calls but no sample is built from its last call
    assert helper.messages == [{"role": "user", "content": "h"},
                               {"role": "assistant", "content": "help"}]
    assert all(s.reward == 0.5 and s.trainable for s in outcome.samples)


async def test_calls_without_returned_messages_still_make_a_sample(
    endpoint: RecordingEndpoint,
) -> None:
    (outcome,) = await runner(endpoint, Recorder, RewardAll).run_all([make_row(0, "calls-only")])
    (main,) = outcome.samples
    assert main.id == "main" and main.messages[-1] == {"role": "assistant", "content": "final"}
    assert outcome.ok and endpoint.pending() == {}


class Picky(Grader[Any]):
    async def grade(self, ctx: GraderContext[Any]) -> None:
        mode = ctx.label
        if mode == "raise":
            raise KeyError("label")
        if mode == "sleep":
            await asyncio.sleep(30)
        if mode == "nan":
            ctx.set_sample_reward("main", math.nan)
        if mode == "unknown":
            ctx.set_sample_reward("nope", 1.0)
        if mode == "remove":
            ctx.remove_sample("main")
        if mode == "partial":
            ctx.set_sample_reward("main", 1.0)  # and forgets 'helper'


@pytest.mark.parametrize(
    ("label", "category", "message"),
    [
        ("raise", ErrorCategory.GRADER_ERROR, "KeyError: 'label'"),
        ("sleep", ErrorCategory.TIMEOUT, "grader timed out after 3 s"),
        ("nan", ErrorCategory.VALIDATION_ERROR, "RewardError: set_sample_reward('main', nan): "
                                                "the reward must be finite"),
        ("unknown", ErrorCategory.VALIDATION_ERROR, "unknown sample id 'nope' (samples: main)"),
        ("none", ErrorCategory.GRADER_ERROR, "grader set no reward for sample 'main': call "
                                             "ctx.set_sample_reward('main', reward) or "
                                             "ctx.remove_sample('main')"),
    ],
)
async def test_grader_failures_fail_the_samples_never_reward_zero(
    endpoint: RecordingEndpoint, label: str, category: ErrorCategory, message: str
) -> None:
    rows = [make_row(0, "a", label), make_row(1, "b", "remove")]
    bad, removed = await runner(endpoint, grader=Picky, grader_timeout_s=3).run_all(rows)
    assert bad.status is SampleStatus.FAILED and bad.reward is None
    assert bad.error is not None and bad.error.category is category and bad.error.where == "grader"
    assert message in bad.error.message
    (sample,) = bad.samples
    assert sample.reward is None and sample.error == bad.error and not sample.trainable
    assert removed.status is SampleStatus.SKIPPED and removed.samples[0].status is SampleStatus.SKIPPED


async def test_a_sample_left_without_reward_fails_alone(endpoint: RecordingEndpoint) -> None:
    (outcome,) = await runner(endpoint, Recorder, Picky).run_all([make_row(0, "sources", "partial")])
    by_id = {s.id: s for s in outcome.samples}
    assert by_id["main"].status is SampleStatus.SUCCESS and by_id["main"].reward == 1.0
    for sid in ("critic", "helper"):
        assert by_id[sid].status is SampleStatus.FAILED and by_id[sid].reward is None
        assert by_id[sid].error is not None
        assert f"grader set no reward for sample {sid!r}" in by_id[sid].error.message
    assert outcome.status is SampleStatus.SUCCESS and outcome.reward == 1.0


async def test_without_grader_samples_keep_no_reward(endpoint: RecordingEndpoint) -> None:
    (outcome,) = await runner(endpoint, grader=None).run_all([make_row(0, "a")])
    assert outcome.ok and outcome.reward is None and outcome.samples[0].reward is None


async def test_outcomes_stream_as_they_finish(endpoint: RecordingEndpoint) -> None:
    class Timed(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
            await asyncio.sleep(float(ctx.prompt[-1]["content"]))
            return [{"role": "assistant", "content": "x"}]

    rows = [make_row(0, "0.3"), make_row(1, "0.0"), make_row(2, "0.1")]
    order = [o.row_index async for o in runner(endpoint, Timed, None, concurrency=3).run(rows)]
    assert order == [1, 2, 0]


async def test_concurrency_is_bounded_and_rows_are_pulled_lazily(
    endpoint: RecordingEndpoint,
) -> None:
    pulled = 0
    active = peak = 0

    def rows() -> Any:
        nonlocal pulled
        for i in range(50):
            pulled += 1
            yield make_row(i, "x")

    full = asyncio.Event()

    class Busy(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            if active == 4:
                full.set()
            # The first rollouts wait for each other, so the peak never depends on timing
            # (the wait is a hang guard: a runner admitting fewer fails the peak assert).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(full.wait(), 60)
            await asyncio.sleep(0.01)
            active -= 1
            return [{"role": "assistant", "content": "x"}]

    r = runner(endpoint, Busy, None, concurrency=4, n_samples=2)
    count = 0
    async for _ in r.run(rows()):
        count += 1
        if count == 1:
            assert pulled <= 4  # 4 rollouts in flight = 2 rows x 2 samples, plus one look-ahead
    assert count == 100 and peak == 4 and r.peak_in_flight == 4


async def test_workflow_config_max_concurrent_limits_further(endpoint: RecordingEndpoint) -> None:
    active = peak = 0
    full = asyncio.Event()

    class Busy(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            if active == 2:
                full.set()
            with contextlib.suppress(TimeoutError):  # as above: the peak is reached by design
                await asyncio.wait_for(full.wait(), 60)
            await asyncio.sleep(0.01)
            active -= 1
            return [{"role": "assistant", "content": "x"}]

    config = AgentWorkflowConfig(name="b", concurrency=ConcurrencyConfig(max_concurrent=2))
    r = RolloutRunner(Entrypoint(Busy, None, workflow_config=config), endpoint, concurrency=10)
    assert len(await r.run_all([make_row(i) for i in range(10)])) == 10
    assert peak == 2


async def test_cancelling_the_run_cancels_in_flight_rollouts(endpoint: RecordingEndpoint) -> None:
    started: list[str] = []
    cancelled: list[str] = []
    three_started = asyncio.Event()

    class Slow(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
            started.append(ctx.rollout_id)
            if len(started) == 3:
                three_started.set()
            ep = current_rollout().endpoint
            assert isinstance(ep, RecordingEndpoint)
            ep.record(ctx.rollout_id, "main", ctx.prompt, "partial")
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(ctx.rollout_id)
                raise
            return []

    r = runner(endpoint, Slow, None, concurrency=3)
    received: list[Any] = []

    async def consume() -> None:
        async for o in r.run([make_row(i) for i in range(10)]):
            received.append(o)

    task = asyncio.create_task(consume())
    await three_started.wait()
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cancelled) == sorted(started) and len(started) == 3
    assert received == [] and r.in_flight == 0
    assert endpoint.pending() == {}  # the cancelled rollouts' calls were collected and dropped


async def test_breaking_out_early_stops_the_rest(endpoint: RecordingEndpoint) -> None:
    calls = 0

    never = asyncio.Event()

    class Count(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
            nonlocal calls
            calls += 1
            if ctx.row_index > 0:  # only row 0 finishes: how many start never depends on timing
                await never.wait()
            return [{"role": "assistant", "content": "x"}]

    r = runner(endpoint, Count, None, concurrency=2)
    async with aclosing(r.run([make_row(i) for i in range(100)])) as stream:
        async for _ in stream:
            break
    assert calls <= 3 and r.in_flight == 0


async def test_a_stray_cancelled_error_is_recorded_not_propagated(
    endpoint: RecordingEndpoint,
) -> None:
    class Stray(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
            inner = asyncio.create_task(asyncio.sleep(10))
            inner.cancel()
            await inner  # raises CancelledError although nobody cancelled this rollout
            return []

    outcomes = await runner(endpoint, Stray, None).run_all([make_row(0), make_row(1)])
    for o in outcomes:
        assert o.error is not None and o.error.category is ErrorCategory.CANCELLED
        assert "Stray.run raised CancelledError" in o.error.message


async def test_run_groups_yields_whole_groups(endpoint: RecordingEndpoint) -> None:
    class Jitter(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
            await asyncio.sleep(0.001 * ((ctx.row_index * 7 + ctx.sample_index * 3) % 5))
            return [{"role": "assistant", "content": "x"}]

    async def rows() -> Any:
        for i in range(6):
            yield make_row(i)

    groups = [g async for g in runner(endpoint, Jitter, None, n_samples=4, concurrency=5)
              .run_groups(rows())]
    assert sorted(g.row.row_index for g in groups) == list(range(6))
    for g in groups:
        assert [o.sample_index for o in g.outcomes] == [0, 1, 2, 3]
        assert {o.row_index for o in g.outcomes} == {g.row.row_index}


async def test_entrypoint_path_and_argument_checks(tmp_path: Path, endpoint: RecordingEndpoint) -> None:
    path = tmp_path / "main.py"
    path.write_text(
        "from osmosis_ai.rollout import AgentWorkflow\n"
        "class W(AgentWorkflow):\n"
        "    async def run(self, ctx):\n"
        "        return [{'role': 'assistant', 'content': ctx.prompt[-1]['content']}]\n"
    )
    async with RolloutRunner(path, endpoint) as r:
        (o,) = await r.run_all([make_row(0, "hello")])
    assert o.ok and o.samples[0].messages[-1]["content"] == "hello"
    with pytest.raises(ValueError, match="n_samples must be >= 1, got 0"):
        RolloutRunner(path, endpoint, n_samples=0)
    with pytest.raises(ValueError, match="concurrency must be >= 1, got 0"):
        RolloutRunner(path, endpoint, concurrency=0)
    with pytest.raises(ValueError, match="backend must be 'local' or 'process', got 'ray'"):
        RolloutRunner(path, endpoint, backend="ray")  # type: ignore[arg-type]


async def test_outcome_is_json_serialisable(endpoint: RecordingEndpoint) -> None:
    (o,) = await runner(endpoint, Recorder, RewardAll).run_all([make_row(0, "sources")])
    data = o.model_dump(mode="json")
    assert data["status"] == "success" and len(data["samples"]) == 3
    assert data["samples"][0]["calls"] or data["samples"][1]["calls"]


async def test_a_thousand_concurrent_rollouts_are_held(endpoint: RecordingEndpoint) -> None:
    started = 0
    all_in = asyncio.Event()

    class Wait(AgentWorkflow[Any]):
        async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
            nonlocal started
            started += 1
            if started == 1000:
                all_in.set()
            # Each holds until all are in flight (a slow machine cannot finish one early);
            # the wait is a hang guard: a runner admitting fewer fails the peak assert.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_in.wait(), 60)
            return [{"role": "assistant", "content": "A"}]

    r = runner(endpoint, Wait, Exact, concurrency=1000)
    outcomes = await r.run_all([make_row(i) for i in range(1000)])
    assert r.peak_in_flight == 1000
    assert sum(o.reward == 1.0 for o in outcomes) == 1000
    assert len({o.rollout_id for o in outcomes}) == 1000


async def test_run_groups_keeps_repeated_rows_apart(endpoint: RecordingEndpoint) -> None:
    row = make_row(3, "a", "A")
    groups = [g async for g in runner(endpoint, n_samples=2, concurrency=3).run_groups([row, row])]
    assert len(groups) == 2
    assert all(len(g.outcomes) == 2 and g.row is row for g in groups)


async def test_a_custom_backend_can_run_the_workflows(endpoint: RecordingEndpoint) -> None:
    from osmosis_ai.rollout.running import WorkflowRequest, WorkflowRun

    seen: list[WorkflowRequest] = []

    class Canned:
        async def run_workflow(self, request: WorkflowRequest) -> WorkflowRun:
            seen.append(request)
            return WorkflowRun(messages=[{"role": "assistant", "content": "A"}])

        async def aclose(self) -> None:
            return None

    r = RolloutRunner(Entrypoint(Echo, Exact), endpoint, backend=Canned(), n_samples=2,
                      workflow_timeout_s=9)
    outcomes = await r.run_all([make_row(0, "ignored", "A")])
    assert [o.reward for o in outcomes] == [1.0, 1.0]
    assert [(q.row_index, q.sample_index, q.timeout_s) for q in seen] == [(0, 0, 9), (0, 1, 9)]
