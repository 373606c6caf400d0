"""GatewayRolloutSource: GRPO groups come from the runner, once; tool use is counted per sample."""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from osmosis_ai.data import DatasetRow
from osmosis_ai.rollout import LLMCall, RolloutSample, SampleStatus, ToolCall
from osmosis_ai.rollout.running import RolloutGroup, RolloutOutcome, RolloutRunner
from osmosis_ai.testing import FakeOpenAIServer
from osmosis_trainer.loop._rollouts import StepRollouts
from osmosis_trainer.loop._source import GatewayRolloutSource
from osmosis_trainer.loop._trainer import _rollout_metrics, tool_metrics

ENTRY = '''
from osmosis_ai.rollout import AgentWorkflow, Grader

class Chat(AgentWorkflow):
    async def run(self, ctx):
        reply = await ctx.chat()
        return [*ctx.prompt, reply.message]

class ByIndex(Grader):
    async def grade(self, ctx):
        for sid in ctx.samples:
            ctx.set_sample_reward(sid, float(ctx.sample_index))
'''


@pytest.fixture()
def entry(tmp_path: Path) -> Path:
    path = tmp_path / "main.py"
    path.write_text(textwrap.dedent(ENTRY))
    return path


def _row(i: int) -> DatasetRow:
    return DatasetRow(i, i, [{"role": "user", "content": f"q{i}"}], "x", {}, None, f"q{i}")


async def test_each_row_position_is_one_group_even_when_rows_repeat(entry: Path) -> None:
    row = _row(7)
    async with FakeOpenAIServer(script=["a"]) as server:
        runner = RolloutRunner(entry, server, n_samples=3, concurrency=6)
        source = GatewayRolloutSource(runner, server)
        try:
            out = await source.collect([row, row, _row(8)], step=1)
        finally:
            await runner.aclose()
    assert out.n_rollouts == 9 and out.n_failed == 0
    groups: dict[int, list[float]] = {}
    for s in out.samples:
        groups.setdefault(s.group_id, []).append(s.reward)
    # The same row given twice is two GRPO groups (row_index alone would merge them into six).
    assert sorted(groups) == [0, 1, 2]
    assert all(sorted(rewards) == [0.0, 1.0, 2.0] for rewards in groups.values())


class _ReversedRunner:
    """Finishes the groups in reverse row order, as a cluster's workers may."""

    n_samples = 2

    async def run_groups(self, rows: list[DatasetRow]) -> AsyncIterator[RolloutGroup]:
        for pos in reversed(range(len(rows))):
            outcomes = [
                RolloutOutcome(
                    rollout_id=f"r{pos}s{k}", row_index=rows[pos].row_index, sample_index=k,
                    status=SampleStatus.SUCCESS,
                    samples=[_sample("main", float(pos), [0])],
                )
                for k in range(self.n_samples)
            ]
            yield RolloutGroup(row=rows[pos], outcomes=outcomes, position=pos)

    async def aclose(self) -> None:
        return None


async def test_a_step_keeps_row_order_however_the_groups_finish() -> None:
    # The update sums micro-batches in batch order: arrival order would change the weights.
    source = GatewayRolloutSource(_ReversedRunner(), gateway=None)  # type: ignore[arg-type]
    out = await source.collect([_row(5), _row(3), _row(9)], step=1)
    assert [(s.group_id, s.rollout_id) for s in out.samples] == [
        (0, "r0s0"), (0, "r0s1"), (1, "r1s0"), (1, "r1s1"), (2, "r2s0"), (2, "r2s1"),
    ]
    assert [s.reward for s in out.samples] == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]


def _call(i: int, prompt: list[int], completion: list[int], tools: int) -> LLMCall:
    return LLMCall(
        call_id=f"c{i}", rollout_id="r", sample_id="main", request_messages=[],
        response_message={"role": "assistant", "content": ""}, finish_reason="stop",
        tool_calls=[ToolCall(id=f"t{i}{k}", name="add", arguments="{}") for k in range(tools)],
        prompt_token_ids=prompt, completion_token_ids=completion,
        logprobs=[-0.5] * len(completion),
    )


def _sample(sid: str, reward: float, tool_calls: list[int]) -> RolloutSample:
    calls, ids = [], [1, 2, 3]
    for i, n in enumerate(tool_calls):
        completion = [10 + i, 11 + i]
        calls.append(_call(i, list(ids), completion, n))
        ids = ids + completion + [7]  # the tool result, then the next prompt
    return RolloutSample(id=sid, calls=calls, reward=reward)


def test_tool_use_per_step_counts_tool_calls_and_turns_of_each_graded_sample() -> None:
    runner = SimpleNamespace(n_samples=1)  # collect() is not called: samples are added directly
    source = GatewayRolloutSource(runner, gateway=None)  # type: ignore[arg-type]
    out = StepRollouts()
    # Two chained calls then an answer; one call then an answer; an answer alone.
    for i, calls in enumerate(([1, 1, 0], [1, 0], [0])):
        source._add_sample(out, 0, f"r{i}", _sample("main", 1.0, calls))
    assert [(s.tool_calls, s.model_calls) for s in out.samples] == [(2, 3), (1, 2), (0, 1)]
    metrics = _rollout_metrics(out, pass_threshold=1.0)
    assert metrics["tools/call_rate"] == pytest.approx(2 / 3)
    assert metrics["tools/calls_per_rollout"] == pytest.approx(1.0)
    assert metrics["tools/turns_per_rollout"] == pytest.approx(2.0)


def test_a_step_without_graded_samples_reports_no_tool_use() -> None:
    assert tool_metrics([]) == {}


async def test_a_release_reaches_a_gateway_that_can_free_memory_and_skips_one_that_cannot() -> None:
    class Releasing:
        released = 0

        async def swap_adapter(self, path: str, version: int) -> None: ...

        async def release_idle_memory(self) -> None:
            self.released += 1

    class Plain:
        async def swap_adapter(self, path: str, version: int) -> None: ...

    gateway = Releasing()
    await GatewayRolloutSource(_ReversedRunner(), gateway).release_idle_memory()
    assert gateway.released == 1
    await GatewayRolloutSource(_ReversedRunner(), Plain()).release_idle_memory()  # a no-op
